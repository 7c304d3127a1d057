# MariaDB for fence-mysql: Debian's mariadb-server (10.11 on Debian 12), our own instance (not
# the system service) as the `mysql` user on 127.0.0.1 only, data under .services/mariadb/,
# stopped by the server's PID (its --pid-file). Idempotent: the server this project started is
# reused, any other process on the port refused. MySQL 8 itself is not packaged in Debian.

MARIADB_PORT=${FENCE_MARIADB_PORT:-3340}
mariadb_dir="$FENCE_SERVICES_DIR/mariadb"

export FENCE_MYSQL_URL="mysql://fence:fence@127.0.0.1:$MARIADB_PORT/fence"

mariadb_install() {
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null && return 0
  echo "installing mariadb-server from Debian"
  apt-get update -qq
  # policy-rc.d (where present) keeps apt from starting the system service; ours runs apart.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
}

mariadb_start() {
  mariadb_install
  if ours_on_port "$MARIADB_PORT" "$mariadb_dir/mariadbd.pid"; then
    echo "mariadb on 127.0.0.1:$MARIADB_PORT was started by this project; reusing it"
    return 0
  fi
  require_free "$MARIADB_PORT" FENCE_MARIADB_PORT mariadb || return 1
  mkdir -p "$mariadb_dir"
  chown mysql "$mariadb_dir"
  if [ ! -d "$mariadb_dir/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$mariadb_dir/data" \
      --auth-root-authentication-method=socket --skip-test-db \
      >"$mariadb_dir/install.log" 2>&1 || { cat "$mariadb_dir/install.log" >&2; return 1; }
  fi
  # --no-defaults: the system's my.cnf (its port, socket, data dir) is not ours.
  mariadbd --no-defaults --user=mysql --datadir="$mariadb_dir/data" \
    --bind-address=127.0.0.1 --port="$MARIADB_PORT" --socket="$mariadb_dir/mariadbd.sock" \
    --pid-file="$mariadb_dir/mariadbd.pid" --log-error="$mariadb_dir/error.log" \
    --skip-name-resolve --innodb-flush-log-at-trx-commit=1 \
    >"$mariadb_dir/mariadbd.out" 2>&1 </dev/null &
  # The server writes its own PID file (as the mysql user); known to the exit trap from now.
  started_here "$mariadb_dir/mariadbd.pid"
  local i
  for ((i = 0; i < 300; i++)); do
    [ -s "$mariadb_dir/mariadbd.pid" ] && [ -S "$mariadb_dir/mariadbd.sock" ] && break
    kill -0 $! 2>/dev/null || break
    sleep 0.1
  done
  # The tests' account (every privilege on this private loopback instance), on every start:
  # also the proof that the server answers.
  mariadb --no-defaults -uroot --socket="$mariadb_dir/mariadbd.sock" -e "
    CREATE USER IF NOT EXISTS 'fence'@'127.0.0.1' IDENTIFIED BY 'fence';
    GRANT ALL ON *.* TO 'fence'@'127.0.0.1' WITH GRANT OPTION;
    CREATE DATABASE IF NOT EXISTS fence;" || { tail -20 "$mariadb_dir/error.log" >&2; return 1; }
  echo "mariadb: $FENCE_MYSQL_URL"
}

mariadb_stop() {
  stop_pidfile "$mariadb_dir/mariadbd.pid" 20
}
mariadb_demo_backend() { echo mysql; }
