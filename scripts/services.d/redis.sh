# Redis for fence-redis: a standalone server (AOF, appendfsync always) with one replica (for
# WAIT), and a 3-master Redis Cluster. Debian's redis-server, loopback only, data under
# .services/redis/, idempotent: a server this project started on a port is reused, any other
# process on a port (or on a cluster node's bus port, port + 10000) is refused.

REDIS_PORT=${FENCE_REDIS_PORT:-6390}
REDIS_REPLICA_PORT=${FENCE_REDIS_REPLICA_PORT:-6391}
REDIS_CLUSTER_PORTS=(${FENCE_REDIS_CLUSTER_PORTS:-7101 7102 7103})
redis_dir="$FENCE_SERVICES_DIR/redis"

export FENCE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
export FENCE_REDIS_REPLICA_URL="redis://127.0.0.1:$REDIS_REPLICA_PORT"
FENCE_REDIS_CLUSTER=""
for p in "${REDIS_CLUSTER_PORTS[@]}"; do FENCE_REDIS_CLUSTER+="${FENCE_REDIS_CLUSTER:+,}redis://127.0.0.1:$p"; done
export FENCE_REDIS_CLUSTER

redis_install() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
  echo "installing redis-server from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
}

redis_answers() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = "PONG" ]; }

# Starts one redis-server on port $1 (moved by variable $2) with data in $redis_dir/$1; $3 is
# `cluster` for a cluster node (which also holds the bus port, port + 10000) or `standalone`;
# extra arguments follow.
redis_start_one() {
  local port=$1 variable=$2 kind=$3; shift 3
  local dir="$redis_dir/$port"
  if ours_on_port "$port" "$dir/redis.pid"; then
    echo "redis on 127.0.0.1:$port was started by this project; reusing it"
    return 0
  fi
  require_free "$port" "$variable" redis || return 1
  if [ "$kind" = cluster ]; then
    require_free $((port + 10000)) "$variable" "redis cluster bus" || return 1
    set -- --cluster-enabled yes --cluster-config-file "nodes-$port.conf" --cluster-node-timeout 5000 "$@"
  fi
  mkdir -p "$dir"
  started_here "$dir/redis.pid"
  redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes --dir "$dir" \
    --appendonly yes --appendfsync always --save "" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@"
  local i
  for ((i = 0; i < 100; i++)); do redis_answers "$port" && return 0; sleep 0.1; done
  echo "redis on port $port did not start; log:" >&2
  tail -20 "$dir/redis.log" >&2
  return 1
}

redis_cluster_ok() { redis-cli -p "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

redis_start() {
  redis_install
  redis_start_one "$REDIS_PORT" FENCE_REDIS_PORT standalone
  redis_start_one "$REDIS_REPLICA_PORT" FENCE_REDIS_REPLICA_PORT standalone --replicaof 127.0.0.1 "$REDIS_PORT"
  local p
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_start_one "$p" FENCE_REDIS_CLUSTER_PORTS cluster
  done
  if ! redis_cluster_ok "${REDIS_CLUSTER_PORTS[0]}"; then
    local known
    known=$(redis-cli -p "${REDIS_CLUSTER_PORTS[0]}" cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p')
    if [ "$known" = "1" ]; then
      local nodes=()
      for p in "${REDIS_CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$p"); done
      redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
    fi
  fi
  local i
  for ((i = 0; i < 300; i++)); do
    local all_ok=1
    for p in "${REDIS_CLUSTER_PORTS[@]}"; do redis_cluster_ok "$p" || all_ok=0; done
    [ "$all_ok" = 1 ] && break
    sleep 0.1
  done
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_cluster_ok "$p" || { echo "redis cluster is not ok on port $p" >&2; return 1; }
  done
  # The replica must be in sync before WAIT tests count it.
  for ((i = 0; i < 100; i++)); do
    redis-cli -p "$REDIS_REPLICA_PORT" info replication | grep -q 'master_link_status:up' && break
    sleep 0.1
  done
  echo "redis: standalone $FENCE_REDIS_URL (replica $FENCE_REDIS_REPLICA_URL), cluster $FENCE_REDIS_CLUSTER"
}

redis_stop() {
  local p
  for p in "$REDIS_REPLICA_PORT" "$REDIS_PORT" "${REDIS_CLUSTER_PORTS[@]}"; do
    stop_pidfile "$redis_dir/$p/redis.pid" 10
  done
}

redis_demo_backend() { echo redis; }
