//! MariaDB: the shared server `scripts/test` starts, and dedicated servers a test owns (to
//! kill -9 and restart them), run as the `mysql` user like the shared one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::mysql::MySqlPoolOptions;
use sqlx::MySqlPool;

use crate::process::ManagedProcess;
use crate::unavailable;

/// The shared server's URL, if it listens.
pub fn shared_url() -> Option<String> {
    let url = std::env::var("FENCE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://fence:fence@127.0.0.1:3340/fence".into());
    if crate::shared_server_answers(&url, || crate::listens(&address(&url))) {
        Some(url)
    } else {
        unavailable(&format!("the shared MariaDB at {url}")).map(|_| String::new())
    }
}

pub use crate::url_address as address;

/// A unique database name for `test` (see [`crate::unique_sql_name`]).
pub fn unique_database(test: &str) -> String {
    crate::unique_sql_name(test)
}

/// A pool of up to 16 connections to `url`.
pub async fn pool(url: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .expect("connect to MariaDB")
}

/// The uid and gid of the `mysql` user, from /etc/passwd.
fn mysql_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"mysql"))
            .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
            .flatten()
    })
}

/// Whether the MariaDB binaries are installed (`scripts/test` installs them).
fn installed() -> bool {
    ["mariadbd", "mariadb-install-db"].iter().all(|bin| {
        Command::new("sh")
            .args(["-c", &format!("command -v {bin}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `chown -R` to the mysql user.
fn give_to_mysql(path: &Path, user: (u32, u32)) {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", user.0, user.1))
        .arg(path)
        .status()
        .expect("chown runs");
    assert!(status.success(), "chown -R mysql {}", path.display());
}

/// An initialised data dir for this test process, copied for each dedicated server (one
/// `mariadb-install-db` per process instead of one per server).
fn template(user: (u32, u32)) -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let root = crate::data_root("mariadb-tests");
        remove_orphan_templates(&root);
        let dir = root.join(format!("template-{}", crate::unique_suffix()));
        std::fs::create_dir_all(&dir).expect("template dir");
        give_to_mysql(&dir, user);
        let status = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=mysql", "--skip-test-db"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("mariadb-install-db runs");
        assert!(
            status.success(),
            "mariadb-install-db failed in {}",
            dir.display()
        );
        dir.join("data")
    })
}

/// Removes the templates of test processes that have ended (`template-<pid>.…`, the pid no
/// longer running): a template lives as long as its process, which cannot remove it on exit.
fn remove_orphan_templates(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("template-")
            .and_then(|rest| rest.split('.').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// A MariaDB server owned by the test (its own port and data dir), stopped when dropped.
pub struct MariaDbServer {
    /// The port it listens on.
    pub port: u16,
    process: ManagedProcess,
}

impl MariaDbServer {
    /// Starts a server on a free port with a fresh copy of an initialised data dir; `None`
    /// (loud skip) without the MariaDB binaries or the `mysql` user.
    pub fn start(name: &str) -> Option<Self> {
        let (Some(user), true) = (mysql_user(), installed()) else {
            unavailable("the MariaDB binaries and the mysql user (run scripts/test)")?;
            return None;
        };
        let template = template(user);
        Some(ManagedProcess::start(
            "mariadbd",
            "mariadb-tests",
            name,
            |process| {
                let dir = process.dir().to_path_buf();
                let copied = Command::new("cp")
                    .arg("-a")
                    .arg(template)
                    .arg(dir.join("data"))
                    .status()
                    .expect("cp runs");
                assert!(copied.success(), "copying the data dir template");
                // The tests' account, on every start (the server runs this before serving).
                std::fs::write(
                    dir.join("init.sql"),
                    "CREATE USER IF NOT EXISTS 'fence'@'127.0.0.1' IDENTIFIED BY 'fence';\n\
                     GRANT ALL ON *.* TO 'fence'@'127.0.0.1' WITH GRANT OPTION;\n\
                     CREATE DATABASE IF NOT EXISTS fence;\n",
                )
                .expect("init file");
                give_to_mysql(&dir, user);
                let server = MariaDbServer {
                    port: crate::free_port(),
                    process,
                };
                server.spawn().then_some(server)
            },
        ))
    }

    /// Starts the server on its port and data; false if the port turned out to be taken.
    fn spawn(&self) -> bool {
        let dir = self.process.dir();
        let log = dir.join("error.log");
        // A restart must not find the last run's "ready" line.
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new("mariadbd");
        command
            .args(["--no-defaults", "--user=mysql", "--bind-address=127.0.0.1"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", dir.join("mariadbd.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--init-file={}", dir.join("init.sql").display()))
            .args(["--skip-name-resolve", "--innodb-flush-log-at-trx-commit=1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let address = format!("127.0.0.1:{}", self.port);
        self.process
            .spawn_and_wait(&mut command, self.port, Duration::from_secs(30), || {
                crate::listens(&address)
                    && std::fs::read_to_string(&log)
                        .is_ok_and(|text| text.contains("ready for connections"))
            })
    }

    /// Its connection URL.
    pub fn url(&self) -> String {
        format!("mysql://fence:fence@127.0.0.1:{}/fence", self.port)
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server: one process, so a pause stops it all.
    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// SIGKILL (a crash: no shutdown, InnoDB recovers from its redo log) and start again on
    /// the same port and data.
    pub fn kill_and_restart(&self) {
        self.process.kill();
        if !self.spawn() {
            let log =
                std::fs::read_to_string(self.process.dir().join("error.log")).unwrap_or_default();
            panic!(
                "mariadbd did not come back on port {}; its log:\n{log}",
                self.port
            );
        }
    }
}

/// Waits up to 10 s until at least `count` sessions in `information_schema.PROCESSLIST` meet
/// `condition` (SQL with one `?`, bound to `argument`): a statement waiting for a lock, an idle
/// session.
pub async fn wait_for_sessions(
    pool: &MySqlPool,
    condition: &str,
    argument: &str,
    count: i64,
    what: &str,
) {
    let query = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE {condition}");
    crate::wait_for_count(what, count, || async {
        sqlx::query_scalar(&query)
            .bind(argument)
            .fetch_one(pool)
            .await
            .expect("read information_schema.PROCESSLIST")
    })
    .await;
}

#[async_trait::async_trait]
impl crate::sql::SqlTestbed for fence_mysql::MySqlDialect {
    type Server = MariaDbServer;

    fn start(test: &str) -> Option<MariaDbServer> {
        MariaDbServer::start(test)
    }

    fn url(server: &MariaDbServer) -> String {
        server.url()
    }

    fn kill_and_restart(server: &MariaDbServer) {
        server.kill_and_restart();
    }

    fn shared_url() -> Option<String> {
        shared_url()
    }

    fn unique_namespace(test: &str) -> String {
        unique_database(test)
    }

    async fn pool(url: &str) -> MySqlPool {
        pool(url).await
    }

    async fn migrate(pool: &MySqlPool, database: &str) -> Result<(), fence_core::FenceError> {
        fence_mysql::migrate(pool, database).await
    }

    const UNREACHABLE_URL: &'static str = "mysql://fence:fence@127.0.0.1:1/fence";
    // 0 is no token of Fence's (the column is unsigned: NULL would read as "no mark yet").
    const NO_MARK: &'static str = "hwm = 0";

    fn counter_table(table: &str) -> String {
        format!("CREATE TABLE {table} (domain VARCHAR(256) PRIMARY KEY, n BIGINT NOT NULL)")
    }

    fn count_up(_table: &str) -> String {
        " ON DUPLICATE KEY UPDATE n = n + 1".to_owned()
    }
}
