# Kafka for fence-kafka: Apache Kafka (KRaft, one node as broker and controller) from Maven
# Central artifacts (scripts/kafka/pom.xml, fetched once by scripts/kafka/fetch), on 127.0.0.1
# only, data under .services/kafka/. Two shared brokers, one per transaction protocol:
# FENCE_KAFKA_BOOTSTRAP formatted with transaction.version=2 (KIP-890, the 4.x default) and
# FENCE_KAFKA_V1_BOOTSTRAP with transaction.version=1. Brokers a test owns (to kill, pause or
# restart; the three-node cluster) are started by fence-testkit with the same scripts/kafka/broker.
# Idempotent: a broker this project started is reused, any other process on its client or
# controller port (port + 1) refused.

KAFKA_PORT=${FENCE_KAFKA_PORT:-19092}
KAFKA_V1_PORT=${FENCE_KAFKA_V1_PORT:-19094}
kafka_dir="$FENCE_SERVICES_DIR/kafka"

export FENCE_KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
export FENCE_KAFKA_V1_BOOTSTRAP="127.0.0.1:$KAFKA_V1_PORT"

# Starts the shared broker named $1 on port $2 (controller on $2+1; both moved by variable $4),
# transaction protocol $3, and checks, from the broker's own log, the protocol its controller
# finalized (a broker of ours is reused only if it is formatted the same way).
kafka_start_one() {
  local name=$1 port=$2 version=$3 variable=$4 dir="$kafka_dir/$1" started=$SECONDS
  if ours_on_port "$port" "$dir/broker.pid"; then
    echo "the broker on 127.0.0.1:$port was started by this project; reusing it"
  else
    require_free "$port" "$variable" "kafka $name" || return 1
    require_free $((port + 1)) "$variable" "kafka $name controller" || return 1
    mkdir -p "$dir"
    setsid "$services_root/scripts/kafka/broker" --dir "$dir" --node 1 --port "$port" \
      --controller-port $((port + 1)) --transaction-version "$version" \
      >"$dir/stdout.log" 2>&1 </dev/null &
    echo $! >"$dir/broker.pid"
    started_here "$dir/broker.pid"
    wait_for_port "$port" 60 || { tail -20 "$dir/stdout.log" "$dir/server.log" >&2; return 1; }
  fi
  local i
  for ((i = 0; i < 100; i++)); do
    grep -q "finalizedFeatures=.*transaction.version=$version" "$dir/server.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "finalizedFeatures=.*transaction.version=$version" "$dir/server.log" 2>/dev/null || {
    echo "the broker on 127.0.0.1:$port did not finalize transaction.version=$version (see $dir/server.log); stop it" >&2
    return 1
  }
  echo "kafka $name (Apache Kafka, transaction.version=$version): 127.0.0.1:$port in $((SECONDS - started)) s"
}

kafka_start() {
  FENCE_KAFKA_LIB=$("$services_root/scripts/kafka/fetch")
  export FENCE_KAFKA_LIB
  kafka_start_one shared "$KAFKA_PORT" 2 FENCE_KAFKA_PORT
  kafka_start_one shared-v1 "$KAFKA_V1_PORT" 1 FENCE_KAFKA_V1_PORT
}

kafka_stop() {
  stop_pidfile "$kafka_dir/shared/broker.pid" 20
  stop_pidfile "$kafka_dir/shared-v1/broker.pid" 20
}

kafka_demo_backend() { echo kafka; }
