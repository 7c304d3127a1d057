//! Retiring a domain on Redis: every key of the domain (`<prefix>:{<domain>}:*`, user keys and
//! outbox keys included) but its re-base records, deleted in one script that refuses under a
//! live lease.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::error::unexpected;
use crate::ops::glob_escape;
use crate::scripts::RETIRE;
use crate::RedisFence;

#[async_trait]
impl Retirer for RedisFence {
    /// Walks the keyspace for the domain's keys (`SCAN`, every master of a cluster: an
    /// operator's step, not a hot path), then deletes them in one script with the lease check.
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        let keys = &self.inner.keys;
        let rebases = keys.rebases(domain);
        let mut doomed = vec![keys.lease(domain)];
        doomed.extend(
            self.scan(&format!("{}*", glob_escape(&keys.domain_keys(domain))))
                .await?
                .into_iter()
                .filter(|key| *key != rebases),
        );
        let reply = self
            .eval(&RETIRE, domain, Operation::Write, true, &doomed, &[])
            .await?;
        match reply.tag.as_str() {
            "held" => Err(FenceError::LeaseHeld {
                domain: domain.clone(),
            }),
            "ok" => reply
                .text(0)?
                .parse()
                .map(Retired::new)
                .map_err(|_| unexpected("retire", domain, "a count that is not a number")),
            other => Err(unexpected("retire", domain, format!("answer `{other}`"))),
        }
    }
}
