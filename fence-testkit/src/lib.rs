//! Fence's test kit (not published): managed server processes a test owns (redis-server,
//! `weed mini`, Apache Kafka, postgres, etcd) to kill, pause and restart; the shared servers
//! `scripts/test` starts; unique names per test; the client set-up tests and fence-bench share;
//! a real local webhook server; a `metrics` recorder that keeps what it is given. One module
//! per backend, each behind its feature; `sql` holds what the SQL adapters' tests share.
//!
//! Under the project's test command (`FENCE_REQUIRE_SERVICES=1`) a shared server that does not
//! answer fails the test; in a bare `cargo test` it is skipped with a loud notice
//! ([`unavailable`]).
// Panicking on a broken test set-up is this crate's job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "azurite")]
pub mod azurite;
#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod envelope;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub mod kafka_broker;
#[cfg(feature = "kafka")]
pub mod kafka_sasl;
pub mod metrics;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod process;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;

/// What the test kit's macros name (not part of its API).
#[doc(hidden)]
pub mod __private {
    pub use fence_conformance;
    pub use fence_conformance::services::domain;
    pub use fence_conformance::{lease, retirement};
    pub use fence_core::{BoxFuture, Domain, Observed};
}

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use fence_conformance::services::{required, unavailable};

/// `<pid>.<nanos>.<n>`: unique across processes and calls, the tail of every test's names.
pub fn unique_suffix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}.{}.{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// True when something accepts TCP connections at `address` (`host:port`) within 300 ms.
pub fn listens(address: &str) -> bool {
    address
        .parse()
        .ok()
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
}

/// Waits up to 10 s until `seen()` counts at least `count` sessions (`what` names them): the
/// body of the SQL modules' `wait_for_sessions`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn wait_for_count<F, Fut>(what: &str, count: i64, seen: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    fence_conformance::wait::until_async(
        &format!("{count} session(s): {what}"),
        Duration::from_secs(10),
        || async { seen().await >= count },
    )
    .await;
}

/// The `host:port` of a `scheme://user[:password]@host:port/db` URL.
pub fn url_address(url: &str) -> String {
    url.rsplit('@')
        .next()
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_owned()
}

/// A unique SQL schema or database name for `test` (`[a-z_][a-z0-9_]*`, at most 63 bytes).
pub fn unique_sql_name(test: &str) -> String {
    let test: String = test
        .chars()
        .take(24)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("ft_{test}_{}", unique_suffix().replace('.', "_"))
}

/// Whether the shared server `name` passes `probe`, asked up to three times a few hundred
/// milliseconds apart: on a loaded two-core machine one probe can miss its timeout, and a shared
/// server wrongly taken for absent fails a test under the test command. A server found absent
/// is remembered for the process, so a bare `cargo test` without servers skips at once.
pub fn shared_server_answers(name: &str, probe: impl Fn() -> bool) -> bool {
    static ABSENT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let absent = || {
        ABSENT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if absent().iter().any(|known| known == name) {
        return false;
    }
    let answers = (0..3).any(|attempt| {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        probe()
    });
    if !answers {
        absent().push(name.to_owned());
    }
    answers
}

/// A loopback port free right now (the caller confirms it once its server answers).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The folder for the data of servers tests own: `$FENCE_SERVICES_DIR/<what>`, by default
/// under the repository's ignored `.services` folder.
pub fn data_root(what: &str) -> PathBuf {
    services_dir().join(what)
}

/// `$FENCE_SERVICES_DIR`, or the repository's `.services` folder.
pub fn services_dir() -> PathBuf {
    std::env::var("FENCE_SERVICES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.services"))
}
