# Kafka for fence-kafka: noida-db (a Kafka-protocol broker in one binary) from PyPI, in a venv
# under .services/, on 127.0.0.1 only, data under .services/noida/. The real binary is started
# directly (not its Python wrapper) so that its PID is ours to stop. Idempotent.

KAFKA_VERSION=0.2.3
KAFKA_PORT=${FENCE_KAFKA_PORT:-19092}
kafka_dir="$FENCE_SERVICES_DIR/noida"
kafka_venv="$FENCE_SERVICES_DIR/noida-venv"

export FENCE_KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

kafka_binary() { ls "$kafka_venv"/lib/python3*/site-packages/noida_db/noida-db 2>/dev/null | head -1; }

kafka_install() {
  if [ -n "$(kafka_binary)" ] && "$kafka_venv/bin/pip" show noida-db 2>/dev/null | grep -q "^Version: $KAFKA_VERSION$"; then
    return 0
  fi
  echo "installing noida-db==$KAFKA_VERSION into $kafka_venv"
  python3 -m venv "$kafka_venv"
  "$kafka_venv/bin/pip" install -q --disable-pip-version-check "noida-db==$KAFKA_VERSION"
}

kafka_start() {
  kafka_install
  # The conformance suite starts its own short-lived brokers with this binary.
  FENCE_NOIDA_BIN="$(kafka_binary)"
  export FENCE_NOIDA_BIN
  if (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
    echo "a broker already listens on $FENCE_KAFKA_BOOTSTRAP; reusing it"
    return 0
  fi
  mkdir -p "$kafka_dir/data"
  setsid "$FENCE_NOIDA_BIN" start --only kafka --kafka-port "$KAFKA_PORT" --host 127.0.0.1 \
    --data-dir "$kafka_dir/data" >"$kafka_dir/noida.log" 2>&1 </dev/null &
  echo $! >"$kafka_dir/noida.pid"
  wait_for_port "$KAFKA_PORT" 30 || { tail -20 "$kafka_dir/noida.log" >&2; return 1; }
  echo "kafka (noida-db): $FENCE_KAFKA_BOOTSTRAP"
}

kafka_stop() {
  stop_pidfile "$kafka_dir/noida.pid" 10
}

kafka_demo_backend() { echo kafka; }
