# DynamoDB for fence-dynamodb: moto's server mode (PyPI moto 5.2.5, an open-source emulator;
# DynamoDB Local is not used: its licence is the vendor's own), in a venv under .services/,
# on 127.0.0.1 only, serving one request at a time (scripts/services.d/moto-dynamodb.py says
# why). In memory: nothing survives a restart, so none is tested. Idempotent: the instance
# this project started is reused, any other process on its port refused.

MOTO_VERSION=5.2.5
DYNAMODB_PORT=${FENCE_DYNAMODB_PORT:-8042}
dynamodb_dir="$FENCE_SERVICES_DIR/dynamodb"
moto_venv="$FENCE_SERVICES_DIR/moto-venv"

export FENCE_DYNAMODB_ENDPOINT="http://127.0.0.1:$DYNAMODB_PORT"

dynamodb_install() {
  if [ -x "$moto_venv/bin/python" ] &&
    [ "$("$moto_venv/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" = "$MOTO_VERSION" ]; then
    return 0
  fi
  echo "installing moto[dynamodb,server]==$MOTO_VERSION into $moto_venv"
  python3 -m venv "$moto_venv"
  "$moto_venv/bin/pip" install -q --disable-pip-version-check "moto[dynamodb,server]==$MOTO_VERSION"
}

dynamodb_answers() {
  curl -s --max-time 2 -X POST -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
    -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=probe/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
    -d '{}' "$FENCE_DYNAMODB_ENDPOINT/" 2>/dev/null | grep -q TableNames
}

dynamodb_start() {
  dynamodb_install
  if ours_on_port "$DYNAMODB_PORT" "$dynamodb_dir/moto.pid"; then
    echo "moto (DynamoDB) on $FENCE_DYNAMODB_ENDPOINT was started by this project; reusing it"
    return 0
  fi
  require_free "$DYNAMODB_PORT" FENCE_DYNAMODB_PORT "moto DynamoDB" || return 1
  mkdir -p "$dynamodb_dir"
  (cd "$dynamodb_dir" && exec "$moto_venv/bin/python" "$services_root/scripts/services.d/moto-dynamodb.py" \
    "$DYNAMODB_PORT" >"$dynamodb_dir/moto.log" 2>&1 </dev/null) &
  echo $! >"$dynamodb_dir/moto.pid"
  started_here "$dynamodb_dir/moto.pid"
  local i
  for ((i = 0; i < 300; i++)); do
    dynamodb_answers && { echo "moto (DynamoDB): $FENCE_DYNAMODB_ENDPOINT"; return 0; }
    kill -0 "$(cat "$dynamodb_dir/moto.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "moto (DynamoDB) did not become ready; log:" >&2
  tail -20 "$dynamodb_dir/moto.log" >&2
  return 1
}

dynamodb_stop() {
  stop_pidfile "$dynamodb_dir/moto.pid" 10
}
