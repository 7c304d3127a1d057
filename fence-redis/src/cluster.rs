//! A Redis Cluster connection that is opened again from the seed nodes when it stops answering.
//!
//! redis-rs's cluster connection repairs single nodes in the background, but when every node
//! went away at once (the whole cluster restarted) its requests can keep failing against
//! connections it still believes are up, long after the nodes are back (redis-rs#2277, open at
//! redis 1.8.1; seen here once in the cluster torture run: every request for over 30 s). A new
//! connection from the client connects to the seeds and reads the slot map afresh, so after a
//! request fails for a connection reason the fence opens one in the background and later
//! requests use it. Only requests that start afterwards use it: a failed request's outcome is
//! decided as before (ambiguous unless it provably never left).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError};

/// The least time between two reconnects, so a cluster that is down is not hammered.
const REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// The connection requests use now, and how to open the next one.
pub(crate) struct Cluster {
    current: RwLock<ClusterConnection>,
    /// `None` for a connection the caller built: theirs to configure, never replaced.
    client: Option<ClusterClient>,
    /// When the last reopen started; held while one runs.
    reopening: tokio::sync::Mutex<Option<Instant>>,
}

impl Cluster {
    /// A connection opened from `client`, reopened from it after connection failures.
    pub(crate) fn reopenable(connection: ClusterConnection, client: ClusterClient) -> Arc<Self> {
        Arc::new(Cluster {
            current: RwLock::new(connection),
            client: Some(client),
            reopening: tokio::sync::Mutex::new(None),
        })
    }

    /// The caller's own connection, used as it is.
    pub(crate) fn fixed(connection: ClusterConnection) -> Arc<Self> {
        Arc::new(Cluster {
            current: RwLock::new(connection),
            client: None,
            reopening: tokio::sync::Mutex::new(None),
        })
    }

    /// The connection to send on now (a cheap handle to a shared multiplexed connection).
    pub(crate) fn connection(&self) -> ClusterConnection {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Called with every error a request got: one that says the connection failed starts a
    /// reopen in the background (at most one at a time, one per [`REOPEN_INTERVAL`]).
    pub(crate) fn failed(self: &Arc<Self>, error: &RedisError) {
        if self.client.is_none() || !connection_failure(error) {
            return;
        }
        let this = Arc::clone(self);
        let reason = error.to_string();
        tokio::spawn(async move {
            let Ok(mut last) = this.reopening.try_lock() else {
                return;
            };
            if last.is_some_and(|at| at.elapsed() < REOPEN_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
            let Some(client) = &this.client else {
                return;
            };
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
        });
    }
}

/// Whether `error` came from the connection or the cluster's routing rather than from a
/// command's own answer (a script's refusal, NOPERM, WRONGTYPE, which a new connection would
/// only repeat).
fn connection_failure(error: &RedisError) -> bool {
    !matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) || error.is_cluster_error()
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
    }
}
