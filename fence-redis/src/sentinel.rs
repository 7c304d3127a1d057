//! The master a set of Redis Sentinels names, followed across failovers.
//!
//! The sentinels are asked for the master when the first request needs it and again whenever
//! a request shows the master may have moved: the connection was refused or lost, or the
//! server answered that it is a read-only replica now (a demoted master). A refused request
//! and a `READONLY` answer prove nothing ran, so they are sent again to the new master; a
//! lost answer stays what it is (ambiguous for a change) and only the next request goes to
//! the new master.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::SentinelClient;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};

use fence_core::BackendErrorKind;

use crate::error::{kind_of, never_sent, RESEND_BACKOFF};

/// How often a request refused by a moved master is sent again (the sentinels need a few
/// seconds to promote a replica: past this the caller's own retry policy decides).
const RESENDS: u32 = 4;

/// One master, found through its sentinels.
pub(crate) struct SentinelMaster {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    service: String,
    config: ConnectionManagerConfig,
    /// How long one lookup through the sentinels may take.
    lookup_timeout: Duration,
    /// The master in use, with a generation so that a failure forgets only what it used.
    current: Mutex<Current>,
}

#[derive(Default)]
struct Current {
    generation: u64,
    manager: Option<ConnectionManager>,
}

impl SentinelMaster {
    pub(crate) fn new(
        sentinels: SentinelClient,
        service: String,
        config: ConnectionManagerConfig,
        lookup_timeout: Duration,
    ) -> Self {
        SentinelMaster {
            sentinels: tokio::sync::Mutex::new(sentinels),
            service,
            config,
            lookup_timeout,
            current: Mutex::new(Current::default()),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        // A panic elsewhere cannot leave `Current` half-written: keep using it.
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The master's connection and its generation: the one in use, or a new one to the master
    /// the sentinels name now (who check that it answers `ROLE` as a master).
    async fn manager(&self) -> RedisResult<(u64, ConnectionManager)> {
        if let Some(found) = self.in_use() {
            return Ok(found);
        }
        // Type-erased: a lookup through the sentinels is a deep future, kept out of the type of
        // every request's future.
        let lookup: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> =
            Box::pin(self.look_up());
        lookup.await
    }

    async fn look_up(&self) -> RedisResult<(u64, ConnectionManager)> {
        let mut sentinels = self.sentinels.lock().await;
        // Another request may have looked it up while this one waited.
        if let Some(found) = self.in_use() {
            return Ok(found);
        }
        let lookup = async {
            let master = sentinels.async_get_client().await?;
            ConnectionManager::new_with_config(master, self.config.clone()).await
        };
        let manager = match tokio::time::timeout(self.lookup_timeout, lookup).await {
            Ok(Ok(manager)) => manager,
            Ok(Err(error)) => return Err(self.lookup_failed(&mut sentinels, error).await),
            Err(_) => {
                let late = RedisError::from((ErrorKind::Io, "timed out"));
                return Err(self.lookup_failed(&mut sentinels, late).await);
            }
        };
        let mut current = self.current();
        current.generation += 1;
        current.manager = Some(manager.clone());
        Ok((current.generation, manager))
    }

    /// The error of a lookup that found no master. Nothing was sent to a master, so it is
    /// never one that could leave a change ambiguous: `MASTERDOWN` (retryable: a failover is
    /// under way, or every sentinel is out of reach), or, when a sentinel answers that it
    /// monitors no such service, a configuration error a retry cannot mend.
    async fn lookup_failed(&self, sentinels: &mut SentinelClient, error: RedisError) -> RedisError {
        // Refused credentials or commands (a wrong master password, a user without `ROLE`,
        // which the master check runs) stay what they are: no retry mends them.
        if kind_of(&error) == BackendErrorKind::PermissionDenied {
            return error;
        }
        let unknown = error.kind() == ErrorKind::MasterNameNotFoundBySentinel
            && self.service_unknown(sentinels).await;
        if unknown {
            return RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel monitors this service",
                self.service.clone(),
            ));
        }
        RedisError::from((
            ErrorKind::Server(ServerErrorKind::MasterDown),
            "no reachable master found through the sentinels",
            format!("service {}: {error}", self.service),
        ))
    }

    /// True when a sentinel answers that it monitors no service of this name.
    async fn service_unknown(&self, sentinels: &mut SentinelClient) -> bool {
        let ask = async {
            let client = sentinels.async_get_sentinel_client().await?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.service)
                .query_async::<Option<Vec<String>>>(&mut connection)
                .await
        };
        matches!(
            tokio::time::timeout(self.lookup_timeout, ask).await,
            Ok(Ok(None))
        )
    }

    fn in_use(&self) -> Option<(u64, ConnectionManager)> {
        let current = self.current();
        current
            .manager
            .clone()
            .map(|manager| (current.generation, manager))
    }

    /// Forgets the master of `generation`, so the next request asks the sentinels again.
    fn forget(&self, generation: u64) {
        let mut current = self.current();
        if current.generation == generation {
            current.manager = None;
        }
    }

    /// Sends a request with `send` to the master; see the module docs for what is sent again.
    pub(crate) async fn run<T, F, Fut>(&self, mut send: F) -> RedisResult<T>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut resent = 0;
        loop {
            let outcome = match self.manager().await {
                Ok((generation, manager)) => (Some(generation), send(manager).await),
                Err(error) => (None, Err(error)),
            };
            let (generation, result) = outcome;
            let Err(error) = &result else {
                return result;
            };
            if let (Some(generation), true) = (generation, master_may_have_moved(error)) {
                self.forget(generation);
            }
            let nothing_ran =
                generation.is_none() || never_sent(error) || refused_as_replica(error);
            let misconfigured = error.kind() == ErrorKind::MasterNameNotFoundBySentinel;
            if !nothing_ran || misconfigured || resent >= RESENDS {
                return result;
            }
            resent += 1;
            tracing::debug!(%error, resent, "the redis master may have moved; asking the sentinels again");
            tokio::time::sleep(RESEND_BACKOFF.delay(resent - 1)).await;
        }
    }
}

/// An answer from a server that is not (or no longer) the master: it refused to run a change.
pub(crate) fn refused_as_replica(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    ) || error
        .to_string()
        // Redis 6 wraps a script's refusal in ERR: `… -READONLY You can't write against a
        // read only replica.`
        .contains("READONLY You can't write against a read only replica")
}

/// An error after which the same master should not be used again without asking.
fn master_may_have_moved(error: &RedisError) -> bool {
    refused_as_replica(error)
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_refusal_is_recognised_on_redis_6_and_7() {
        let seven = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(refused_as_replica(&seven));
        let six = RedisError::from((
            ErrorKind::Extension,
            "Error running script",
            "ERR Error running script (call to f_1): @user_script:2: @user_script: 2: -READONLY You can't write against a read only replica.".to_owned(),
        ));
        assert!(refused_as_replica(&six));
        let other = RedisError::from((ErrorKind::Io, "connection reset"));
        assert!(!refused_as_replica(&other));
        assert!(master_may_have_moved(&other));
    }
}
