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

# The PID of the process listening on TCP port $1 (on any local address): empty when nothing
# listens, `unknown` when the holder cannot be seen (another user's process). Read from /proc,
# without connecting: probing a port with a request would already write to whoever holds it.
port_listener() {
  local inode holder
  inode=$(awk -v p="$(printf ':%04X' "$1")" \
    'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { print $10; exit }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  [ -n "$inode" ] || return 0
  holder=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\\[$inode\\]" -print -quit 2>/dev/null)
  holder=${holder#/proc/}
  echo "${holder%%/*}" | grep . || echo unknown
}

# The PID in file $1 when that process is alive and is a server of this project: its command
# line or working directory names the PID file's own directory under .services/ (its data).
# A PID left in a stale file and reused by an unrelated process is not ours.
our_process() {
  local pidfile=$1 pid dir
  [ -f "$pidfile" ] || return 1
  pid=$(head -1 "$pidfile")
  [[ "$pid" =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ] || return 1
  dir=$(cd "$(dirname "$pidfile")" && pwd)
  case "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) $(readlink "/proc/$pid/cwd" 2>/dev/null)/" in
    *"$dir/"*) echo "$pid" ;;
    *) return 1 ;;
  esac
}

# Whether the process listening on port $1 is the server whose PID file is $2 (that process or
# a child of it, as `our_process` tells): a server this project started, and so the only kind
# it reuses.
ours_on_port() {
  local port=$1 ours pid
  ours=$(our_process "$2") || return 1
  pid=$(port_listener "$port")
  while [ -n "$pid" ] && [ "$pid" != unknown ] && [ "$pid" -gt 1 ]; do
    [ "$pid" = "$ours" ] && return 0
    pid=$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
  done
  return 1
}

# Fails, naming the port, its holder and the variable that moves it, when anything listens on
# port $1; $2 is that variable, $3 what the port is for. Nothing is sent to the holder.
require_free() {
  local port=$1 variable=$2 what=$3 pid command=
  pid=$(port_listener "$port")
  [ -n "$pid" ] || return 0
  [ "$pid" = unknown ] || command=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80 | sed 's/ *$//')
  echo "127.0.0.1:$port ($what) is taken by a process this project did not start (pid $pid${command:+: $command}):" \
    "the tests never write to a server they did not start; stop it, or set $variable to free ports" >&2
  return 1
}

# Pid files of the servers this shell started; `services_stop_started` stops only these.
SERVICES_STARTED=()
started_here() { SERVICES_STARTED+=("$1"); }

# Whether this shell started the server of PID file $1.
started_by_this_shell() {
  local started
  for started in "${SERVICES_STARTED[@]}"; do
    [ "$started" = "$1" ] && return 0
  done
  return 1
}

# Stops the server whose PID is in file $1 (signal $3, default TERM, then KILL after $2
# seconds), if it is ours (`our_process`: a stale PID is never signalled). When
# STOP_ONLY_STARTED is set, only a server this shell started.
stop_pidfile() {
  local pidfile=$1 grace=${2:-10} signal=${3:-TERM} pid i
  [ -f "$pidfile" ] || return 0
  if [ -n "${STOP_ONLY_STARTED:-}" ] && ! started_by_this_shell "$pidfile"; then
    return 0
  fi
  if pid=$(our_process "$pidfile"); then
    kill "-$signal" "$pid" 2>/dev/null || true
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

# Stops the servers this shell started, and leaves those it found running (started earlier by
# `scripts/services up`, say) as they were.
services_stop_started() {
  STOP_ONLY_STARTED=1 services_stop
}

# The demo backends to run: memory plus every started service that has a demo backend.
demo_backends() {
  echo memory
  local s
  for s in "${SERVICES[@]}"; do
    if declare -F "${s}_demo_backend" >/dev/null; then "${s}_demo_backend"; fi
  done
}
