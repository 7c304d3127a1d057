//! A domain's own admission settings (`<prefix>:{<domain>}:bounds`): bounds every client of the
//! domain obeys, whatever it was built with. Per domain, not per prefix: on Redis Cluster a
//! script touches one slot, the domain's, so the settings live with the domain's other keys.

use std::num::NonZeroU64;

use fence_core::{BoundsConfig, Domain, FenceError, Operation};

use crate::fence::RedisFence;
use crate::reply::Reply;
use crate::scripts::BOUNDS;

impl RedisFence {
    /// Stores `bounds` as `domain`'s own, replacing what was stored: from then on every
    /// fenced write, claim, script and outbox transition of the domain, by every client —
    /// including one built without [`crate::RedisFenceBuilder::max_token_step`] or
    /// [`crate::RedisFenceBuilder::issued_only`] — refuses what they refuse, in the same script
    /// as the mark decision. A client's own settings still apply: the tighter of the two wins.
    /// [`BoundsConfig::NONE`] deletes the domain's settings.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_redis::RedisFence) -> Result<(), fence_core::FenceError> {
    /// use std::num::NonZeroU64;
    /// use fence_core::{BoundsConfig, Domain};
    /// let domain = Domain::new("orders")?;
    /// fence.set_domain_bounds(&domain, BoundsConfig::new(NonZeroU64::new(10_000), true)).await?;
    /// assert!(fence.domain_bounds(&domain).await?.issued_only);
    /// # Ok(()) }
    /// ```
    pub async fn set_domain_bounds(
        &self,
        domain: &Domain,
        bounds: BoundsConfig,
    ) -> Result<(), FenceError> {
        let step = bounds.max_step.map_or_else(String::new, |s| s.to_string());
        let issued: &[u8] = if bounds.issued_only { b"1" } else { b"0" };
        let reply = self
            .run_bounds(domain, Operation::Write, &[b"set", step.as_bytes(), issued])
            .await?;
        decode(reply).map(|_| ())
    }

    /// The settings stored for `domain` ([`BoundsConfig::NONE`] when none are).
    pub async fn domain_bounds(&self, domain: &Domain) -> Result<BoundsConfig, FenceError> {
        let reply = self
            .run_bounds(domain, Operation::Read, &[b"get", b"", b"0"])
            .await?;
        decode(reply)
    }

    async fn run_bounds(
        &self,
        domain: &Domain,
        operation: Operation,
        args: &[&[u8]],
    ) -> Result<Reply, FenceError> {
        let keys = [self.inner.keys.bounds(domain)];
        let mutating = operation != Operation::Read;
        self.eval(&BOUNDS, domain, operation, mutating, &keys, args)
            .await
    }
}

fn decode(reply: Reply) -> Result<BoundsConfig, FenceError> {
    if reply.tag != "ok" {
        return Err(reply.into_error());
    }
    let max_step = reply.token(0)?.and_then(|step| NonZeroU64::new(step.get()));
    Ok(BoundsConfig::new(max_step, reply.text(1)? == "1"))
}
