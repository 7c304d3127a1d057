//! Configuration of a [`crate::RedisFence`]: where Redis is, and how fencing behaves there.

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use fence_core::{FenceError, InvalidInput, Observed};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

use crate::keys::Keys;
use crate::target::{MasterAuth, Target, Timeouts};
use crate::{Inner, RedisFence};

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "fence";
/// Default value size limit (Redis accepts up to 512 MiB; large values stall a single-threaded
/// server, so the default is modest).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Redis's own limit on a bulk string.
pub const REDIS_MAX_VALUE_BYTES: usize = 512 * 1024 * 1024;
/// How long operation ids are remembered by default.
pub const DEFAULT_OP_ID_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);
/// Default response timeout; a write that times out is reported as ambiguous.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a change waits for a replica's acknowledgement by default where the fence knows
/// the deployment is replicated (a master found through Sentinel): see
/// [`RedisFenceBuilder::wait_for_replicas`].
pub const DEFAULT_REPLICA_WAIT: Duration = Duration::from_millis(500);

/// The replica acknowledgement a change waits for: chosen, or the target's default.
#[derive(Clone, Copy, Debug)]
enum ReplicaWait {
    Default,
    Chosen(Option<(u32, Duration)>),
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
    op_id_window: Duration,
    response_timeout: Duration,
    connection_timeout: Duration,
    wait: ReplicaWait,
    master_auth: MasterAuth,
    durable: bool,
    max_token_step: Option<NonZeroU64>,
    issued_only: bool,
}

impl RedisFence {
    /// A builder.
    pub fn builder() -> RedisFenceBuilder {
        RedisFenceBuilder::default()
    }
}

impl Default for RedisFenceBuilder {
    fn default() -> Self {
        RedisFenceBuilder {
            target: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_window: DEFAULT_OP_ID_WINDOW,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: Duration::from_secs(2),
            wait: ReplicaWait::Default,
            master_auth: MasterAuth::default(),
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

    /// The master of the service `service` that these sentinels (`redis://[user:password@]host:port`
    /// each, the sentinels' own addresses) monitor, followed across failovers: a request the
    /// old master refused, or that could not reach it, asks the sentinels again. Authenticate
    /// to the master with [`Self::master_auth`].
    ///
    /// A master with replicas can lose an acknowledged change when a replica that had not
    /// received it is promoted, and a stale token would then be accepted: so behind Sentinel
    /// every change waits for one replica's acknowledgement by default (`WAIT 1`
    /// [`DEFAULT_REPLICA_WAIT`], see [`Self::wait_for_replicas`]); choose another count, or
    /// [`Self::no_replica_wait`] to accept that risk.
    pub fn sentinel<I, S>(mut self, sentinels: I, service: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.target = Some(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            service: service.into(),
        });
        self
    }

    /// The credentials of the master found through [`Self::sentinel`] (a user name is
    /// optional: `None` authenticates as the default user).
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_auth = MasterAuth {
            username: username.map(str::to_owned),
            password: Some(password.to_owned()),
        };
        self
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
    /// [`fence_core::raw::TokenBounds`]. Redis's own issuer grows by one per acquisition; for tokens
    /// from elsewhere choose a step above the largest legitimate gap between two owners'
    /// tokens (an etcd revision grows with every write in its cluster).
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_token_step = Some(max_step);
        self
    }

    /// How long an operation id's first outcome is kept for replays (default one day): a
    /// window of time, where the other adapters keep a count of ids per domain
    /// ([`fence_core::OpIdRetention`]).
    pub fn op_id_window(mut self, window: Duration) -> Self {
        self.op_id_window = window;
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
        self.wait = ReplicaWait::Chosen(Some((replicas, timeout)));
        self
    }

    /// Acknowledges changes as soon as the master applied them, without waiting for a replica,
    /// also behind Sentinel (where the default waits for one): a failover to a replica that had
    /// not received a change loses it, and with it the mark that fenced stale tokens.
    pub fn no_replica_wait(mut self) -> Self {
        self.wait = ReplicaWait::Chosen(None);
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
    /// on first use. The fence comes inside the telemetry layer ([`Observed`]).
    pub fn build(self) -> Result<Observed<RedisFence>, FenceError> {
        let keys = Keys::new(&self.prefix)?;
        if self.max_value_bytes == 0 || self.max_value_bytes > REDIS_MAX_VALUE_BYTES {
            return Err(InvalidInput::Configuration(format!(
                "max_value_bytes must be 1 to {REDIS_MAX_VALUE_BYTES}, got {}",
                self.max_value_bytes
            ))
            .into());
        }
        if self.op_id_window < Duration::from_millis(1) {
            return Err(
                InvalidInput::Configuration("op_id_window must be at least 1 ms".into()).into(),
            );
        }
        if self.response_timeout.is_zero() || self.connection_timeout.is_zero() {
            return Err(
                InvalidInput::Configuration("timeouts must be greater than zero".into()).into(),
            );
        }
        let wait = match self.wait {
            ReplicaWait::Chosen(wait) => wait,
            ReplicaWait::Default if matches!(self.target, Some(Target::Sentinel { .. })) => {
                Some((1, DEFAULT_REPLICA_WAIT))
            }
            ReplicaWait::Default => None,
        };
        if let Some((_, wait)) = wait {
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
        let target = self.target.ok_or_else(|| {
            InvalidInput::Configuration(
                "no Redis target: call url(), cluster(), sentinel(), connection_manager() or cluster_connection()".into(),
            )
        })?;
        let timeouts = Timeouts {
            response: self.response_timeout,
            connection: self.connection_timeout,
        };
        let description = target.describe();
        let (connection, source) = target.open(&self.master_auth, timeouts)?;
        Ok(Observed::new(RedisFence::from_inner(Inner {
            description,
            connection,
            connector: source,
            keys,
            max_value_bytes: self.max_value_bytes,
            op_id_window: self.op_id_window,
            wait,
            durable: self.durable,
            max_token_step: self.max_token_step,
            issued_only: self.issued_only,
        })))
    }

    /// Builds the fence and opens its connection, so that an unreachable server fails here.
    pub async fn connect(self) -> Result<Observed<RedisFence>, FenceError> {
        let fence = self.build()?;
        fence.ping().await?;
        Ok(fence)
    }
}

impl fmt::Debug for RedisFenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = self
            .target
            .as_ref()
            .map_or_else(|| "none".to_owned(), Target::describe);
        f.debug_struct("RedisFenceBuilder")
            .field("target", &target)
            .field("prefix", &self.prefix)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_window", &self.op_id_window)
            .field("wait", &self.wait)
            .field("durable", &self.durable)
            .field("max_token_step", &self.max_token_step)
            .field("issued_only", &self.issued_only)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_debug() {
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
                .op_id_window(Duration::ZERO)
        ));
        assert!(refused(RedisFence::builder().cluster(Vec::<String>::new())));
        assert!(matches!(
            RedisFence::builder().url("not a url").build(),
            Err(FenceError::Backend { .. })
        ));
    }
}
