//! Configuration of a [`crate::RedisFence`]: where Redis is, and how fencing behaves there.

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use fence_core::{FenceError, InvalidInput, Operation};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

use crate::connection::Connection;
use crate::error::map_error;
use crate::fence::Connector;
use crate::keys::Keys;
use crate::{Inner, RedisFence};

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "fence";
/// Default value size limit (Redis accepts up to 512 MiB; large values stall a single-threaded
/// server, so the default is modest).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Redis's own limit on a bulk string.
pub const REDIS_MAX_VALUE_BYTES: usize = 512 * 1024 * 1024;
/// Default retention of operation ids.
pub const DEFAULT_OP_ID_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Default response timeout; a write that times out is reported as ambiguous.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

enum Target {
    Url(String),
    Cluster(Vec<String>),
    Manager(ConnectionManager),
    ClusterConnection(ClusterConnection),
}

/// Builds a [`RedisFence`]. `build` does no I/O; `connect` also opens the connection.
///
/// ```no_run
/// # async fn run() -> Result<(), fence_core::FenceError> {
/// use std::time::Duration;
/// let fence = fence_redis::RedisFence::builder()
///     .url("redis://127.0.0.1:6379")
///     .prefix("billing")
///     .wait_for_replicas(1, Duration::from_millis(50))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
pub struct RedisFenceBuilder {
    target: Option<Target>,
    prefix: String,
    max_value_bytes: usize,
    op_id_retention: Duration,
    response_timeout: Duration,
    connection_timeout: Duration,
    wait: Option<(u32, Duration)>,
    durable: bool,
    max_token_step: Option<NonZeroU64>,
    issued_only: bool,
}

impl Default for RedisFenceBuilder {
    fn default() -> Self {
        RedisFenceBuilder {
            target: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: Duration::from_secs(2),
            wait: None,
            durable: false,
            max_token_step: None,
            issued_only: false,
        }
    }
}

impl RedisFenceBuilder {
    /// Standalone Redis at `url` (`redis://[user:password@]host:port[/db]`, `rediss://` with the
    /// `rustls` feature).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.target = Some(Target::Url(url.into()));
        self
    }

    /// Redis Cluster reached through these seed nodes.
    pub fn cluster<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.target = Some(Target::Cluster(nodes.into_iter().map(Into::into).collect()));
        self
    }

    /// An existing connection manager (its own timeouts apply).
    pub fn connection_manager(mut self, manager: ConnectionManager) -> Self {
        self.target = Some(Target::Manager(manager));
        self
    }

    /// An existing cluster connection (its own timeouts apply).
    pub fn cluster_connection(mut self, connection: ClusterConnection) -> Self {
        self.target = Some(Target::ClusterConnection(connection));
        self
    }

    /// Reads `FENCE_REDIS_URL` or `FENCE_REDIS_CLUSTER` (comma-separated seed nodes) and the
    /// optional `FENCE_REDIS_PREFIX`.
    pub fn from_env() -> Result<Self, FenceError> {
        let mut builder = Self::default();
        if let Ok(nodes) = std::env::var("FENCE_REDIS_CLUSTER") {
            builder = builder.cluster(
                nodes
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from),
            );
        } else if let Ok(url) = std::env::var("FENCE_REDIS_URL") {
            builder = builder.url(url);
        } else {
            return Err(InvalidInput::Configuration(
                "set FENCE_REDIS_URL or FENCE_REDIS_CLUSTER".into(),
            )
            .into());
        }
        if let Ok(prefix) = std::env::var("FENCE_REDIS_PREFIX") {
            builder = builder.prefix(prefix);
        }
        Ok(builder)
    }

    /// The key prefix (default [`DEFAULT_PREFIX`]); no braces, spaces or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Rejects larger values before any I/O (default [`DEFAULT_MAX_VALUE_BYTES`]).
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Accepts only tokens this Redis issued for the domain (by the fence's
    /// [`crate::RedisIssuer`] or [`crate::RedisLeases`] under the same prefix: up to the
    /// domain's `seq` key, which shares the domain's hash slot), refusing others with
    /// [`FenceError::Unissued`] in the same script as the mark decision. Use it only for domains
    /// whose tokens come from this Redis.
    pub fn issued_only(mut self) -> Self {
        self.issued_only = true;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark (above zero for a domain
    /// without one) with [`FenceError::TokenTooFar`], in the same script: see
    /// [`fence_core::TokenBounds`]. Redis's own issuer grows by one per acquisition; for tokens
    /// from elsewhere choose a step above the largest legitimate gap between two owners'
    /// tokens (an etcd revision grows with every write in its cluster).
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_token_step = Some(max_step);
        self
    }

    /// How long an operation id's first outcome is kept for replays (default one day).
    pub fn op_id_retention(mut self, retention: Duration) -> Self {
        self.op_id_retention = retention;
        self
    }

    /// How long to wait for a reply; a write that times out is reported as ambiguous.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// After every fenced change (write, delete, claim, fenced script, outbox transition), runs
    /// `WAIT replicas timeout` and reports the count in
    /// [`fence_core::Accepted::replicas_acknowledged`]. Fewer than `replicas` in time is NOT
    /// success: it is [`FenceError::Unreplicated`] (applied on the primary, could be lost on
    /// failover); retry with the same operation id (a claim: the same token) to wait again.
    /// The crate docs say which settings keep a mark across failover.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some((replicas, timeout));
        self
    }

    /// Declares that the servers keep writes across a restart (`appendonly yes` with
    /// `appendfsync always`, see the crate docs). Only declared, never assumed: it sets
    /// [`fence_core::Capabilities::survives_restart`].
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// Validates the configuration and builds the fence without any I/O; the connection opens
    /// on first use.
    pub fn build(self) -> Result<RedisFence, FenceError> {
        let keys = Keys::new(&self.prefix)?;
        if self.max_value_bytes == 0 || self.max_value_bytes > REDIS_MAX_VALUE_BYTES {
            return Err(InvalidInput::Configuration(format!(
                "max_value_bytes must be 1 to {REDIS_MAX_VALUE_BYTES}, got {}",
                self.max_value_bytes
            ))
            .into());
        }
        if self.op_id_retention < Duration::from_millis(1) {
            return Err(InvalidInput::Configuration(
                "op_id_retention must be at least 1 ms".into(),
            )
            .into());
        }
        if self.response_timeout.is_zero() || self.connection_timeout.is_zero() {
            return Err(
                InvalidInput::Configuration("timeouts must be greater than zero".into()).into(),
            );
        }
        if let Some((_, wait)) = self.wait {
            // WAIT shares the script's round trip: if it could outlast the response timeout, a
            // lagging replica would be reported as an ambiguous outcome.
            if wait.is_zero() || wait >= self.response_timeout {
                return Err(InvalidInput::Configuration(format!(
                    "the replica wait timeout ({wait:?}) must be positive and below the response timeout ({:?})",
                    self.response_timeout
                ))
                .into());
            }
        }
        let (description, connection, source) = match self.target {
            None => {
                return Err(InvalidInput::Configuration(
                    "no Redis target: call url(), cluster(), connection_manager() or cluster_connection()".into(),
                )
                .into())
            }
            Some(Target::Url(url)) => {
                // RESP3, so that the connection reports its own loss: the manager then replaces
                // a dropped connection (a server restart) before the next request is written to
                // it, instead of that request failing in a way that cannot tell whether it left.
                let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map_err(config_error)?;
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                let client = redis::Client::open(info.set_redis_settings(settings))
                    .map_err(config_error)?;
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(self.response_timeout))
                    .set_connection_timeout(Some(self.connection_timeout))
                    .set_number_of_retries(2);
                // The manager spawns a task, so it is made on first use, inside the runtime.
                (redact(&url), OnceCell::new(), Some(Connector::Standalone(client, config)))
            }
            Some(Target::Cluster(nodes)) => {
                if nodes.is_empty() {
                    return Err(InvalidInput::Configuration("cluster needs at least one seed node".into()).into());
                }
                let description = nodes.iter().map(|n| redact(n)).collect::<Vec<_>>().join(",");
                let client = ClusterClientBuilder::new(nodes)
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .response_timeout(self.response_timeout)
                    .connection_timeout(self.connection_timeout)
                    .build()
                    .map_err(config_error)?;
                (format!("cluster {description}"), OnceCell::new(), Some(Connector::Cluster(client)))
            }
            Some(Target::Manager(manager)) => (
                "existing connection".to_owned(),
                OnceCell::new_with(Some(Connection::Standalone(manager))),
                None,
            ),
            Some(Target::ClusterConnection(connection)) => (
                "existing cluster connection".to_owned(),
                OnceCell::new_with(Some(Connection::Cluster(connection))),
                None,
            ),
        };
        Ok(RedisFence::from_inner(Inner {
            description,
            connection,
            connector: source,
            keys,
            max_value_bytes: self.max_value_bytes,
            op_id_retention: self.op_id_retention,
            wait: self.wait,
            durable: self.durable,
            max_token_step: self.max_token_step,
            issued_only: self.issued_only,
        }))
    }

    /// Builds the fence and opens its connection, so that an unreachable server fails here.
    pub async fn connect(self) -> Result<RedisFence, FenceError> {
        let fence = self.build()?;
        fence.ping().await?;
        Ok(fence)
    }
}

impl fmt::Debug for RedisFenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            None => "none".to_owned(),
            Some(Target::Url(url)) => redact(url),
            Some(Target::Cluster(nodes)) => nodes
                .iter()
                .map(|n| redact(n))
                .collect::<Vec<_>>()
                .join(","),
            Some(Target::Manager(_)) => "existing connection".to_owned(),
            Some(Target::ClusterConnection(_)) => "existing cluster connection".to_owned(),
        };
        f.debug_struct("RedisFenceBuilder")
            .field("target", &target)
            .field("prefix", &self.prefix)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("wait", &self.wait)
            .field("durable", &self.durable)
            .field("max_token_step", &self.max_token_step)
            .field("issued_only", &self.issued_only)
            .finish_non_exhaustive()
    }
}

fn config_error(error: redis::RedisError) -> FenceError {
    map_error(error, None, Operation::Read, false)
}

/// A URL with any password replaced by `***`, for Debug and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    match url[scheme_end..].rfind('@') {
        Some(at) => {
            let userinfo = &url[scheme_end..scheme_end + at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!(
                "{}{user}:***@{}",
                &url[..scheme_end],
                &url[scheme_end + at + 1..]
            )
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_debug() {
        assert_eq!(
            redact("redis://:s3cret@host:6379/0"),
            "redis://:***@host:6379/0"
        );
        assert_eq!(redact("rediss://app:s3cret@host"), "rediss://app:***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        let builder = RedisFence::builder().url("redis://app:s3cret@127.0.0.1:1");
        assert!(!format!("{builder:?}").contains("s3cret"));
        let fence = builder.build();
        assert!(fence.is_ok_and(|f| !format!("{f:?}").contains("s3cret")));
    }

    #[test]
    fn bad_configuration_is_refused_without_io() {
        let refused = |b: RedisFenceBuilder| {
            matches!(
                b.build(),
                Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
            )
        };
        assert!(refused(RedisFence::builder()));
        assert!(refused(
            RedisFence::builder()
                .url("redis://127.0.0.1:1")
                .prefix("a{b}")
        ));
        assert!(refused(
            RedisFence::builder()
                .url("redis://127.0.0.1:1")
                .max_value_bytes(0)
        ));
        assert!(refused(
            RedisFence::builder()
                .url("redis://127.0.0.1:1")
                .max_value_bytes(REDIS_MAX_VALUE_BYTES + 1)
        ));
        assert!(refused(
            RedisFence::builder()
                .url("redis://127.0.0.1:1")
                .op_id_retention(Duration::ZERO)
        ));
        assert!(refused(RedisFence::builder().cluster(Vec::<String>::new())));
        assert!(matches!(
            RedisFence::builder().url("not a url").build(),
            Err(FenceError::Backend { .. })
        ));
    }
}
