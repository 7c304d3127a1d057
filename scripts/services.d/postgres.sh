# PostgreSQL for fence-postgres: Debian's postgresql-15, run as the `postgres` user on 127.0.0.1
# only, data under .services/postgres/, stopped by the server's own PID (line 1 of
# postmaster.pid, not the runuser wrapper's). Idempotent: the server this project started is
# reused, any other process on the port refused.

POSTGRES_PORT=${FENCE_POSTGRES_PORT:-5440}
POSTGRES_BIN=${FENCE_POSTGRES_BIN:-/usr/lib/postgresql/15/bin}
postgres_dir="$FENCE_SERVICES_DIR/postgres"

export FENCE_POSTGRES_URL="postgres://fence@127.0.0.1:$POSTGRES_PORT/postgres"
# The conformance suite starts its own short-lived servers with these binaries.
export FENCE_POSTGRES_BIN="$POSTGRES_BIN"

postgres_install() {
  [ -x "$POSTGRES_BIN/postgres" ] && [ -x "$POSTGRES_BIN/initdb" ] && return 0
  echo "installing postgresql-15 from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
}

postgres_start() {
  postgres_install
  # The server's own PID file: ours even when an earlier run stopped waiting for it.
  if ours_on_port "$POSTGRES_PORT" "$postgres_dir/data/postmaster.pid"; then
    head -1 "$postgres_dir/data/postmaster.pid" >"$postgres_dir/postgres.pid"
    echo "postgres on 127.0.0.1:$POSTGRES_PORT was started by this project; reusing it"
    return 0
  fi
  require_free "$POSTGRES_PORT" FENCE_POSTGRES_PORT postgres || return 1
  mkdir -p "$postgres_dir"
  chown postgres "$postgres_dir"
  if [ ! -f "$postgres_dir/data/PG_VERSION" ]; then
    runuser -u postgres -- "$POSTGRES_BIN/initdb" -D "$postgres_dir/data" -A trust -U fence \
      --no-sync >"$postgres_dir/initdb.log" 2>&1 || { cat "$postgres_dir/initdb.log" >&2; return 1; }
  fi
  runuser -u postgres -- "$POSTGRES_BIN/postgres" -D "$postgres_dir/data" \
    -c listen_addresses=127.0.0.1 -p "$POSTGRES_PORT" -k "$postgres_dir" \
    >"$postgres_dir/postgres.log" 2>&1 </dev/null &
  started_here "$postgres_dir/postgres.pid"
  local waited=0
  wait_for_port "$POSTGRES_PORT" 30 || waited=$?
  # Known to the exit trap even when the wait failed (postmaster.pid is written at start).
  head -1 "$postgres_dir/data/postmaster.pid" >"$postgres_dir/postgres.pid" 2>/dev/null || true
  [ "$waited" = 0 ] || { tail -20 "$postgres_dir/postgres.log" >&2; return 1; }
  echo "postgres: $FENCE_POSTGRES_URL"
}

postgres_stop() {
  # A fast shutdown (SIGINT): a smart one (SIGTERM) would wait for every client to leave.
  stop_pidfile "$postgres_dir/postgres.pid" 10 INT
}
postgres_demo_backend() { echo postgres; }
