//! Removing every trace of a domain at its resource: the last step of retiring a domain that
//! will never be used again (LIFECYCLE.md).

use async_trait::async_trait;

use crate::{Domain, FenceError};

/// A resource that can remove a retired domain's state.
///
/// Deleting a domain's mark lets any token write again, a paused holder's included: call it
/// only once no process can hold a token for the domain (LIFECYCLE.md: fence everyone out
/// with a claim and a fenced delete, wait until every process that held a token ended, then
/// retire), and never reuse the name.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// use fence_core::{Domain, Fence, FencedStoreExt, FencingToken, MemoryFence, Retirer};
/// let store = MemoryFence::new();
/// let domain = Domain::new("customer-42")?;
/// store.put(&domain, FencingToken::new(3)?, "closed").await?;
/// assert_eq!(store.retire(&domain).await?.removed, 1);
/// assert_eq!(store.high_water_mark(&domain).await?, None); // gone: never reuse the name
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Retirer: Send + Sync + std::fmt::Debug {
    /// Removes the domain's mark and entry, its issuer counter, remembered operation ids, lease
    /// state and data of its own (user keys, immutable objects), in as few steps as the
    /// resource allows; re-base records, the audit trail, are kept. Refused with
    /// [`FenceError::LeaseHeld`], removing nothing, while a lease on the domain is live.
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError>;
}

/// What [`Retirer::retire`] removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retired {
    /// Keys, rows or objects removed (0: the domain had no state).
    pub removed: usize,
}

impl Retired {
    /// A retirement that removed `removed` keys, rows or objects.
    pub fn new(removed: usize) -> Self {
        Retired { removed }
    }
}
