# Services the tests need, started idempotently on loopback with data under .services/ and
# stopped by PID. Sourced by scripts/test; each backend adds itself to SERVICES.
#
# A service is two functions, <name>_start and <name>_stop, in scripts/services.d/<name>.sh.
# `scripts/services up|down|env` starts, stops or shows them for the examples.

services_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export FENCE_SERVICES_DIR="${FENCE_SERVICES_DIR:-$services_root/.services}"
mkdir -p "$FENCE_SERVICES_DIR"

SERVICES=()
for service_file in "$services_root"/scripts/services.d/*.sh; do
  [ -e "$service_file" ] || continue
  # shellcheck source=/dev/null
  source "$service_file"
  SERVICES+=("$(basename "$service_file" .sh)")
done

# Waits until something listens on 127.0.0.1:$1 (at most $2 seconds).
wait_for_port() {
  local port=$1 seconds=${2:-30} i
  for ((i = 0; i < seconds * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$port after ${seconds}s" >&2
  return 1
}

# Stops the process whose PID is in file $1 (TERM, then KILL after $2 seconds), if we started it.
stop_pidfile() {
  local pidfile=$1 grace=${2:-10} pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

services_start() {
  local s
  for s in "${SERVICES[@]}"; do
    echo "==> starting $s"
    "${s}_start"
  done
}

services_stop() {
  local s
  for s in "${SERVICES[@]}"; do
    "${s}_stop" || true
  done
}

# The demo backends to run: memory plus every started service that has a demo backend.
demo_backends() {
  echo memory
  local s
  for s in "${SERVICES[@]}"; do
    if declare -F "${s}_demo_backend" >/dev/null; then "${s}_demo_backend"; fi
  done
}
