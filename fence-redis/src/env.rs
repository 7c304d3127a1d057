//! The environment variables [`RedisFenceBuilder::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_REDIS_URL` | standalone Redis, `redis://[user:password@]host:port[/db]` (`rediss://` with the `rustls` feature) |
//! | `FENCE_REDIS_CLUSTER` | Redis Cluster: comma-separated seed node URLs |
//! | `FENCE_REDIS_SENTINELS` | Redis behind Sentinel: comma-separated sentinel URLs (with `FENCE_REDIS_SENTINEL_SERVICE`) |
//! | `FENCE_REDIS_SENTINEL_SERVICE` | the service (master) name the sentinels monitor |
//! | `FENCE_REDIS_MASTER_USERNAME`, `FENCE_REDIS_MASTER_PASSWORD` | credentials of the master found through Sentinel (the user name is optional) |
//! | `FENCE_REDIS_PREFIX` | key prefix (default `fence`) |
//! | `FENCE_REDIS_WAIT_REPLICAS` | replicas every change waits for (`0`: none; behind Sentinel the default is 1) |
//! | `FENCE_REDIS_WAIT_TIMEOUT_MS` | how long a change waits for them (default 500) |
//! | `FENCE_REDIS_DURABLE` | `1` declares the servers keep writes across a restart (AOF `appendfsync always`) |
//! | `FENCE_MAX_TOKEN_STEP` | refuse tokens more than this above a domain's mark |
//! | `FENCE_ISSUED_ONLY` | `1`: accept only tokens this Redis issued for the domain |
//!
//! Exactly one of `FENCE_REDIS_URL`, `FENCE_REDIS_CLUSTER` and `FENCE_REDIS_SENTINELS` must be
//! set: two are refused, never silently preferred.

use std::time::Duration;

use fence_core::env::{self, configuration, Env};
use fence_core::FenceError;

use crate::config::DEFAULT_REPLICA_WAIT;
use crate::RedisFenceBuilder;

/// Standalone Redis.
pub const URL: &str = "FENCE_REDIS_URL";
/// Redis Cluster seed nodes.
pub const CLUSTER: &str = "FENCE_REDIS_CLUSTER";
/// Sentinel addresses.
pub const SENTINELS: &str = "FENCE_REDIS_SENTINELS";
/// The service name the sentinels monitor.
pub const SENTINEL_SERVICE: &str = "FENCE_REDIS_SENTINEL_SERVICE";
/// The user name for the master found through Sentinel.
pub const MASTER_USERNAME: &str = "FENCE_REDIS_MASTER_USERNAME";
/// The password for the master found through Sentinel.
pub const MASTER_PASSWORD: &str = "FENCE_REDIS_MASTER_PASSWORD";
/// The key prefix.
pub const PREFIX: &str = "FENCE_REDIS_PREFIX";
/// Replicas every change waits for.
pub const WAIT_REPLICAS: &str = "FENCE_REDIS_WAIT_REPLICAS";
/// How long a change waits for them, in milliseconds.
pub const WAIT_TIMEOUT_MS: &str = "FENCE_REDIS_WAIT_TIMEOUT_MS";
/// Declares durable servers.
pub const DURABLE: &str = "FENCE_REDIS_DURABLE";

impl RedisFenceBuilder {
    /// A builder configured from the process environment: see [`crate::env`] for the
    /// variables. Settings made afterwards on the builder override them.
    ///
    /// ```
    /// use fence_core::env::Env;
    /// // `from_env()` reads the process environment; any other source of settings works alike:
    /// let fence = fence_redis::RedisFenceBuilder::from_env_with(&Env::from_pairs([
    ///     ("FENCE_REDIS_URL", "redis://127.0.0.1:6379"),
    ///     ("FENCE_REDIS_PREFIX", "billing"),
    /// ]))?
    /// .build()?;
    /// assert_eq!(fence.prefix(), "billing");
    /// # Ok::<(), fence_core::FenceError>(())
    /// ```
    pub fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process())
    }

    /// A builder configured from `env` (see [`Self::from_env`]).
    pub fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        let mut builder = Self::default();
        let target = env.one_of(&[URL, CLUSTER, SENTINELS])?;
        let sentinel = matches!(target, Some((SENTINELS, _)));
        builder = match target {
            Some((URL, url)) => builder.url(url),
            Some((CLUSTER, nodes)) => builder.cluster(env::list(&nodes)),
            Some((_, sentinels)) => {
                let service = env.get(SENTINEL_SERVICE).ok_or_else(|| {
                    configuration(format!("{SENTINELS} is set without {SENTINEL_SERVICE}"))
                })?;
                builder.sentinel(env::list(&sentinels), service)
            }
            None => {
                return Err(configuration(format!(
                    "no Redis configured: set {URL}, {CLUSTER} or {SENTINELS}"
                )))
            }
        };
        for only_with_sentinel in [SENTINEL_SERVICE, MASTER_USERNAME, MASTER_PASSWORD] {
            if !sentinel && env.get(only_with_sentinel).is_some() {
                return Err(configuration(format!(
                    "{only_with_sentinel} is set without {SENTINELS}"
                )));
            }
        }
        match (env.get(MASTER_USERNAME), env.get(MASTER_PASSWORD)) {
            (username, Some(password)) => {
                builder = builder.master_auth(username.as_deref(), &password);
            }
            (Some(_), None) => {
                return Err(configuration(format!(
                    "{MASTER_USERNAME} is set without {MASTER_PASSWORD}"
                )))
            }
            (None, None) => {}
        }
        if let Some(prefix) = env.get(PREFIX) {
            builder = builder.prefix(prefix);
        }
        let timeout = env
            .parse::<u64>(WAIT_TIMEOUT_MS)?
            .map(Duration::from_millis);
        match (env.parse::<u32>(WAIT_REPLICAS)?, timeout) {
            (Some(0), Some(_)) => {
                return Err(configuration(format!(
                    "{WAIT_TIMEOUT_MS} is set, but {WAIT_REPLICAS} is 0: nothing waits"
                )))
            }
            (Some(0), None) => builder = builder.no_replica_wait(),
            (Some(replicas), timeout) => {
                builder =
                    builder.wait_for_replicas(replicas, timeout.unwrap_or(DEFAULT_REPLICA_WAIT));
            }
            (None, Some(timeout)) if sentinel => builder = builder.wait_for_replicas(1, timeout),
            (None, Some(_)) => {
                return Err(configuration(format!(
                    "{WAIT_TIMEOUT_MS} is set without {WAIT_REPLICAS}"
                )))
            }
            (None, None) => {}
        }
        builder = builder.durable(env.flag(DURABLE)?);
        if let Some(step) = env.max_token_step()? {
            builder = builder.max_token_step(step);
        }
        if env.issued_only()? {
            builder = builder.issued_only();
        }
        Ok(builder)
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    fn refused(pairs: &[(&str, &str)]) -> String {
        match RedisFenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied())) {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    fn debug(pairs: &[(&str, &str)]) -> String {
        match RedisFenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied())) {
            Ok(builder) => format!("{builder:?}"),
            Err(error) => panic!("refused: {error}"),
        }
    }

    #[test]
    fn one_target_and_its_settings() {
        let shown = debug(&[
            (URL, "redis://app:s3cret@127.0.0.1:6379"),
            (PREFIX, "billing"),
            (WAIT_REPLICAS, "2"),
            (WAIT_TIMEOUT_MS, "250"),
            (DURABLE, "1"),
            ("FENCE_MAX_TOKEN_STEP", "1000"),
            ("FENCE_ISSUED_ONLY", "true"),
        ]);
        for expected in [
            "redis://app:***@127.0.0.1:6379",
            "\"billing\"",
            "Some((2, 250ms))",
            "durable: true",
            "max_token_step: Some(1000)",
            "issued_only: true",
        ] {
            assert!(shown.contains(expected), "{expected} not in {shown}");
        }
        assert!(!shown.contains("s3cret"));
        let cluster = debug(&[(CLUSTER, "redis://a:1, redis://b:2")]);
        assert!(
            cluster.contains("cluster redis://a:1,redis://b:2"),
            "{cluster}"
        );
        let sentinel = debug(&[
            (SENTINELS, "redis://s1:26379,redis://s2:26379"),
            (SENTINEL_SERVICE, "orders"),
            (MASTER_PASSWORD, "s3cret"),
        ]);
        assert!(
            sentinel.contains("sentinel redis://s1:26379,redis://s2:26379 service orders"),
            "{sentinel}"
        );
        assert!(!sentinel.contains("s3cret"), "{sentinel}");
        let unwaited = debug(&[
            (SENTINELS, "redis://s1:26379"),
            (SENTINEL_SERVICE, "orders"),
            (WAIT_REPLICAS, "0"),
        ]);
        assert!(unwaited.contains("Chosen(None)"), "{unwaited}");
    }

    #[test]
    fn conflicting_and_incomplete_settings_are_refused() {
        assert_eq!(
            refused(&[(URL, "redis://a"), (CLUSTER, "redis://b")]),
            "FENCE_REDIS_URL and FENCE_REDIS_CLUSTER are both set: set one"
        );
        assert_eq!(
            refused(&[(CLUSTER, "redis://b"), (SENTINELS, "redis://s")]),
            "FENCE_REDIS_CLUSTER and FENCE_REDIS_SENTINELS are both set: set one"
        );
        assert!(refused(&[]).starts_with("no Redis configured"));
        assert_eq!(
            refused(&[(SENTINELS, "redis://s")]),
            "FENCE_REDIS_SENTINELS is set without FENCE_REDIS_SENTINEL_SERVICE"
        );
        assert_eq!(
            refused(&[(URL, "redis://a"), (MASTER_PASSWORD, "pw")]),
            "FENCE_REDIS_MASTER_PASSWORD is set without FENCE_REDIS_SENTINELS"
        );
        assert_eq!(
            refused(&[(URL, "redis://a"), (WAIT_TIMEOUT_MS, "100")]),
            "FENCE_REDIS_WAIT_TIMEOUT_MS is set without FENCE_REDIS_WAIT_REPLICAS"
        );
        assert!(refused(&[
            (URL, "redis://a"),
            (WAIT_REPLICAS, "0"),
            (WAIT_TIMEOUT_MS, "100")
        ])
        .ends_with("nothing waits"));
        assert!(refused(&[(URL, "redis://a"), (WAIT_REPLICAS, "many")])
            .starts_with("FENCE_REDIS_WAIT_REPLICAS is not valid"));
        assert!(refused(&[(URL, "redis://a"), (DURABLE, "perhaps")])
            .starts_with("FENCE_REDIS_DURABLE must be"));
    }

    #[test]
    fn behind_sentinel_changes_wait_for_a_replica_unless_told_otherwise() {
        let builder = |pairs: &[(&str, &str)]| {
            RedisFenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied()))
                .and_then(RedisFenceBuilder::build)
                .map(|fence| format!("{fence:?}"))
        };
        let sentinel = [
            (SENTINELS, "redis://127.0.0.1:1"),
            (SENTINEL_SERVICE, "orders"),
        ];
        let waited = builder(&sentinel).unwrap();
        assert!(waited.contains("wait: Some((1, 500ms))"), "{waited}");
        let mut unwaited = sentinel.to_vec();
        unwaited.push((WAIT_REPLICAS, "0"));
        assert!(builder(&unwaited).unwrap().contains("wait: None"));
        let standalone = builder(&[(URL, "redis://127.0.0.1:1")]).unwrap();
        assert!(standalone.contains("wait: None"), "{standalone}");
    }
}
