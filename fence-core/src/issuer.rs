//! Token issuers: where fencing tokens come from.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;

use crate::shards::Shards;
use crate::{Domain, FenceError, FencingToken};

/// Issues fencing tokens: strictly increasing per domain, never reused, never wrapped.
///
/// # Behavior
/// - Every call returns a token greater than every token issued before for the domain,
///   including across issuer restarts for durable issuers (Redis `INCR` on a persistent key, a
///   database sequence). An issuer that can go backwards (snapshot restore, an in-memory counter
///   after a crash) breaks fencing: restart it above the greatest token ever issued.
/// - At `u64::MAX` it fails with [`FenceError::TokenExhausted`].
#[async_trait]
pub trait TokenIssuer: Send + Sync + fmt::Debug {
    /// The backend's short name, used in errors, spans and metrics.
    fn backend(&self) -> &'static str;

    /// Issues the domain's next token.
    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError>;
}

/// The in-memory issuer: per-domain counters, for tests and the demo. Not durable.
///
/// ```
/// use fence_core::{Domain, MemoryIssuer, TokenIssuer};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// let issuer = MemoryIssuer::new();
/// let d = Domain::new("shard-7")?;
/// let first = issuer.issue(&d).await?;
/// assert!(issuer.issue(&d).await? > first);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemoryIssuer {
    counters: Shards<HashMap<Domain, u64>>,
    floor: u64,
}

impl MemoryIssuer {
    /// An issuer whose first token for each domain is 1.
    pub fn new() -> Self {
        Self::starting_after(0)
    }

    /// An issuer whose first token for each domain is `floor + 1`: restart an in-memory issuer
    /// above the greatest token it ever issued.
    pub fn starting_after(floor: u64) -> Self {
        MemoryIssuer {
            counters: Shards::new(16),
            floor,
        }
    }

    /// The last token issued for `domain` (`None`: none yet).
    pub fn last_issued(&self, domain: &Domain) -> Option<FencingToken> {
        self.counters.with(domain, |counters| {
            counters
                .get(domain)
                .and_then(|last| FencingToken::new(*last).ok())
        })
    }

    pub(crate) fn issue_now(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        self.counters.with(domain, |counters| {
            let counter = counters.entry(domain.clone()).or_insert(self.floor);
            let next = counter
                .checked_add(1)
                .ok_or_else(|| FenceError::TokenExhausted {
                    domain: domain.clone(),
                })?;
            *counter = next;
            Ok(FencingToken::new(next)?)
        })
    }
}

impl Default for MemoryIssuer {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl TokenIssuer for MemoryIssuer {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        self.issue_now(domain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn issuer_is_strictly_increasing_and_never_wraps() -> Result<(), FenceError> {
        let d = Domain::new("issued")?;
        let issuer = MemoryIssuer::starting_after(u64::MAX - 2);
        assert_eq!(issuer.issue(&d).await?.get(), u64::MAX - 1);
        assert_eq!(issuer.issue(&d).await?.get(), u64::MAX);
        assert!(matches!(
            issuer.issue(&d).await,
            Err(FenceError::TokenExhausted { .. })
        ));
        let other = Domain::new("other")?;
        assert_eq!(issuer.issue(&other).await?.get(), u64::MAX - 1);
        Ok(())
    }
}
