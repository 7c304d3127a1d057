# etcd for fence-etcd: Debian's etcd-server (3.4), one member on 127.0.0.1 only (client, peer
# and metrics ports), data under .services/etcd/, stopped by PID. Idempotent: the member this
# project started is reused, any other process on one of its ports refused. The crate's
# build needs `protoc` (etcd-client compiles etcd's protobuf files): Debian's
# protobuf-compiler, installed here before anything is built.

ETCD_PORT=${FENCE_ETCD_PORT:-2479}
ETCD_PEER_PORT=${FENCE_ETCD_PEER_PORT:-2480}
ETCD_METRICS_PORT=${FENCE_ETCD_METRICS_PORT:-2481}
etcd_dir="$FENCE_SERVICES_DIR/etcd"

export FENCE_ETCD_ENDPOINTS="http://127.0.0.1:$ETCD_PORT"

etcd_install() {
  local missing=()
  command -v etcd >/dev/null && command -v etcdctl >/dev/null || missing+=(etcd-server etcd-client)
  command -v protoc >/dev/null || missing+=(protobuf-compiler)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]} from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

etcd_start() {
  etcd_install
  if ours_on_port "$ETCD_PORT" "$etcd_dir/etcd.pid"; then
    echo "etcd on 127.0.0.1:$ETCD_PORT was started by this project; reusing it"
    return 0
  fi
  require_free "$ETCD_PORT" FENCE_ETCD_PORT etcd || return 1
  require_free "$ETCD_PEER_PORT" FENCE_ETCD_PEER_PORT "etcd peer" || return 1
  require_free "$ETCD_METRICS_PORT" FENCE_ETCD_METRICS_PORT "etcd metrics" || return 1
  # Tests use prefixes of their own: nothing here outlives a run, so start from empty
  # (a never-compacted data dir would grow towards etcd's space quota).
  rm -rf "$etcd_dir/data"
  mkdir -p "$etcd_dir"
  etcd --name fence --data-dir "$etcd_dir/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "fence=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls "http://127.0.0.1:$ETCD_METRICS_PORT" \
    >"$etcd_dir/etcd.log" 2>&1 </dev/null &
  echo $! >"$etcd_dir/etcd.pid"
  started_here "$etcd_dir/etcd.pid"
  wait_for_port "$ETCD_PORT" 30 || { tail -20 "$etcd_dir/etcd.log" >&2; return 1; }
  # The port opens before the member has elected itself: wait until it answers.
  local i
  for ((i = 0; i < 100; i++)); do
    if ETCDCTL_API=3 etcdctl --endpoints "$FENCE_ETCD_ENDPOINTS" endpoint health >/dev/null 2>&1; then
      echo "etcd: $FENCE_ETCD_ENDPOINTS"
      return 0
    fi
    sleep 0.1
  done
  echo "etcd on 127.0.0.1:$ETCD_PORT did not become healthy; log:" >&2
  tail -20 "$etcd_dir/etcd.log" >&2
  return 1
}

etcd_stop() {
  stop_pidfile "$etcd_dir/etcd.pid" 10
}
