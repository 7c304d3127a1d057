//! A Redis Cluster connection that is opened again from the seed nodes when it stops answering.
//!
//! redis-rs's cluster connection repairs single nodes in the background, but when every node
//! went away at once (the whole cluster restarted) its requests can keep failing against
//! connections it still believes are up, long after the nodes are back (redis-rs#2277, open at
//! redis 1.8.1; seen once in CI's cluster torture run, where every request failed for over 30 s,
//! and not reproduced on the development machine). A new
//! connection from the client connects to the seeds and reads the slot map afresh, so after a
//! request fails for a connection reason the fence opens one in the background and later
//! requests use it. Only requests that start afterwards use it: a failed request's outcome is
//! decided as before (ambiguous unless it provably never left).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The least time between two reopens, so a cluster that is down is not hammered.
const REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// The connection requests use now, and how to open the next one.
pub(crate) struct Cluster {
    current: RwLock<ClusterConnection>,
    /// `None` for a connection the caller built: theirs to configure, never replaced.
    client: Option<ClusterClient>,
    /// When the last reopen started.
    last_reopen: Mutex<Option<Instant>>,
    /// A reopen is under way.
    reopening: AtomicBool,
}

impl Cluster {
    /// A connection opened from `client`, reopened from it after connection failures.
    pub(crate) fn reopenable(connection: ClusterConnection, client: ClusterClient) -> Arc<Self> {
        Arc::new(Cluster {
            current: RwLock::new(connection),
            client: Some(client),
            last_reopen: Mutex::new(None),
            reopening: AtomicBool::new(false),
        })
    }

    /// The caller's own connection, used as it is.
    pub(crate) fn fixed(connection: ClusterConnection) -> Arc<Self> {
        Arc::new(Cluster {
            current: RwLock::new(connection),
            client: None,
            last_reopen: Mutex::new(None),
            reopening: AtomicBool::new(false),
        })
    }

    /// The connection to send on now (a cheap handle to a shared multiplexed connection).
    pub(crate) fn connection(&self) -> ClusterConnection {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Called with every error a request got: one that says the connection or the slot map
    /// failed starts a reopen in the background (one at a time, at most one per
    /// [`REOPEN_INTERVAL`]; the check is made here, so a storm of failures spawns nothing).
    pub(crate) fn failed(self: &Arc<Self>, error: &RedisError) {
        let Some(client) = &self.client else {
            return;
        };
        if !connection_failure(error) || !self.due() {
            return;
        }
        let (this, client, reason) = (Arc::clone(self), client.clone(), error.to_string());
        tokio::spawn(async move {
            match client.get_async_connection().await {
                Ok(fresh) => {
                    tracing::info!(%reason, "redis cluster: reopened the connection from the seed nodes");
                    match this.current.write() {
                        Ok(mut current) => *current = fresh,
                        Err(poisoned) => *poisoned.into_inner() = fresh,
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "redis cluster: reopening the connection failed")
                }
            }
            this.reopening.store(false, Ordering::Release);
        });
    }

    /// Whether a reopen may start now; if so, it is marked as started.
    fn due(&self) -> bool {
        let mut last = match self.last_reopen.lock() {
            Ok(last) => last,
            Err(poisoned) => poisoned.into_inner(),
        };
        if last.is_some_and(|at| at.elapsed() < REOPEN_INTERVAL)
            || self.reopening.swap(true, Ordering::AcqRel)
        {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

/// Whether `error` says the connection or the client's slot map failed, which a fresh
/// connection from the seeds can mend: I/O errors (a cut, a refusal, a timeout: a wedged
/// connection only times out), no connection for a slot, a garbled reply, and the cluster's
/// redirections and refusals (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`). Not a
/// command's own answer (a script's refusal, `NOPERM`, `WRONGTYPE`) nor a client or
/// configuration error, which a new connection would only repeat.
fn connection_failure(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Io
            | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::Parse
            | ErrorKind::Server(ServerErrorKind::ReadOnly)
    ) || error.is_cluster_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_refused_by_the_server_keeps_the_connection() {
        let io = |kind| RedisError::from(std::io::Error::from(kind));
        assert!(connection_failure(&io(std::io::ErrorKind::BrokenPipe)));
        assert!(connection_failure(&io(std::io::ErrorKind::TimedOut)));
        assert!(connection_failure(&io(
            std::io::ErrorKind::ConnectionRefused
        )));
        assert!(connection_failure(&RedisError::from((
            ErrorKind::ClusterConnectionNotFound,
            "no connection for the slot"
        ))));
        // A server's error reply, as the client parses it off the wire.
        let server = |code: &str| {
            redis::parse_redis_value(format!("-{code} detail\r\n").as_bytes())
                .and_then(redis::Value::extract_error)
                .err()
                .unwrap_or_else(|| RedisError::from((ErrorKind::Client, "parsed as a value")))
        };
        assert_eq!(
            server("NOPERM").kind(),
            ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        );
        assert!(connection_failure(&server("CLUSTERDOWN")));
        assert!(connection_failure(&server("TRYAGAIN")));
        assert!(!connection_failure(&server("NOPERM")));
        assert!(!connection_failure(&server("WRONGTYPE")));
        assert!(!connection_failure(&server("NOSCRIPT")));
        assert!(connection_failure(&server("READONLY")));
        assert!(!connection_failure(&RedisError::from((
            ErrorKind::AuthenticationFailed,
            "wrong password"
        ))));
    }
}
