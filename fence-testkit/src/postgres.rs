//! PostgreSQL: the shared server `scripts/test` starts, and dedicated servers a test owns (to
//! kill and restart them), run as the `postgres` user like the shared one.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::process::ManagedProcess;
use crate::unavailable;

/// The shared server's URL, if it listens.
pub fn shared_url() -> Option<String> {
    let url = std::env::var("FENCE_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://fence@127.0.0.1:5440/postgres".into());
    if crate::shared_server_answers(&url, || crate::listens(&address(&url))) {
        Some(url)
    } else {
        unavailable(&format!("the shared PostgreSQL at {url}")).map(|_| String::new())
    }
}

pub use crate::url_address as address;

/// A unique schema name for `test` (see [`crate::unique_sql_name`]).
pub fn unique_schema(test: &str) -> String {
    crate::unique_sql_name(test)
}

/// A pool of up to 16 connections to `url`.
pub async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .expect("connect to PostgreSQL")
}

fn bin_dir() -> PathBuf {
    std::env::var("FENCE_POSTGRES_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

/// The uid and gid of the `postgres` user, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"postgres"))
            .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
            .flatten()
    })
}

/// A postgres server owned by the test (its own port and data dir), stopped when dropped.
pub struct PostgresServer {
    /// The port it listens on.
    pub port: u16,
    user: (u32, u32),
    process: ManagedProcess,
}

impl PostgresServer {
    /// Initialises a data dir and starts a server on a free port; `None` (loud skip) without
    /// the PostgreSQL binaries or the `postgres` user.
    pub fn start(name: &str) -> Option<Self> {
        let (Some(user), true) = (postgres_user(), bin_dir().join("postgres").exists()) else {
            unavailable("the PostgreSQL binaries and the postgres user (run scripts/test)")?;
            return None;
        };
        Some(ManagedProcess::start(
            "postgres",
            "postgres-tests",
            name,
            |process| {
                // A fast shutdown: a smart one would wait for the test's pool to leave.
                let process = process.with_stop_signal("INT");
                let dir = process.dir().to_path_buf();
                std::os::unix::fs::chown(&dir, Some(user.0), Some(user.1)).expect("chown data dir");
                let initdb = Command::new(bin_dir().join("initdb"))
                    .arg("-D")
                    .arg(dir.join("data"))
                    .args(["-A", "trust", "-U", "fence", "--no-sync"])
                    .uid(user.0)
                    .gid(user.1)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("initdb runs");
                assert!(initdb.success(), "initdb failed in {}", dir.display());
                let server = PostgresServer {
                    port: crate::free_port(),
                    user,
                    process,
                };
                server.spawn().then_some(server)
            },
        ))
    }

    /// Starts the server on its port and data; false if the port turned out to be taken.
    fn spawn(&self) -> bool {
        let dir = self.process.dir();
        let log = std::fs::File::create(dir.join("postgres.log")).expect("log file");
        let mut command = Command::new(bin_dir().join("postgres"));
        command
            .arg("-D")
            .arg(dir.join("data"))
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-k",
            ])
            .arg(dir)
            .uid(self.user.0)
            .gid(self.user.1)
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log));
        let address = format!("127.0.0.1:{}", self.port);
        self.process
            .spawn_and_wait(&mut command, self.port, Duration::from_secs(20), || {
                crate::listens(&address)
            })
    }

    /// Its connection URL.
    pub fn url(&self) -> String {
        format!("postgres://fence@127.0.0.1:{}/postgres", self.port)
    }

    /// SIGKILL (a crash: no shutdown checkpoint) and start again on the same port and data.
    pub fn kill_and_restart(&self) {
        // The whole server crashes: backends left behind would keep the shared memory attached
        // and the new postmaster would refuse the data dir.
        self.process.kill_with_children();
        if !self.spawn() {
            let log = std::fs::read_to_string(self.process.dir().join("postgres.log"))
                .unwrap_or_default();
            panic!(
                "postgres did not come back on port {}; its log:\n{log}",
                self.port
            );
        }
    }
}

/// Waits until `count` sessions of `pg_stat_activity` match `condition` (SQL over its columns,
/// with `$1` bound to `argument`): a lock waiter queued, a relay listening, a backend inside
/// its COMMIT. Panics, naming `what`, after 10 s.
pub async fn wait_for_sessions(
    pool: &PgPool,
    condition: &str,
    argument: &str,
    count: i64,
    what: &str,
) {
    let query = format!("SELECT count(*) FROM pg_stat_activity WHERE {condition}");
    crate::wait_for_count(what, count, || async {
        sqlx::query_scalar(&query)
            .bind(argument)
            .fetch_one(pool)
            .await
            .expect("read pg_stat_activity")
    })
    .await;
}

#[async_trait::async_trait]
impl crate::sql::SqlTestbed for fence_postgres::PostgresDialect {
    type Server = PostgresServer;

    fn start(test: &str) -> Option<PostgresServer> {
        PostgresServer::start(test)
    }

    fn url(server: &PostgresServer) -> String {
        server.url()
    }

    fn kill_and_restart(server: &PostgresServer) {
        server.kill_and_restart();
    }

    fn shared_url() -> Option<String> {
        shared_url()
    }

    fn unique_namespace(test: &str) -> String {
        unique_schema(test)
    }

    async fn pool(url: &str) -> PgPool {
        pool(url).await
    }

    async fn migrate(pool: &PgPool, schema: &str) -> Result<(), fence_core::FenceError> {
        fence_postgres::migrate(pool, schema).await
    }

    const UNREACHABLE_URL: &'static str = "postgres://fence@127.0.0.1:1/postgres";
    const NO_MARK: &'static str = "hwm = NULL";

    fn counter_table(table: &str) -> String {
        format!("CREATE TABLE {table} (domain text PRIMARY KEY, n bigint NOT NULL)")
    }

    fn count_up(table: &str) -> String {
        format!(" ON CONFLICT (domain) DO UPDATE SET n = {table}.n + 1")
    }
}
