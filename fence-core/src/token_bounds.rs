//! What a resource admits above its mark: tokens its issuer vouches for, within a bounded step.

use std::fmt;
use std::num::NonZeroU64;

use crate::{Domain, FenceError, FencingToken};

/// What the resource sees of the domain's issuer, read in the same atomic step as the mark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum IssuerView {
    /// The resource does not check tokens against an issuer.
    #[default]
    Unchecked,
    /// A counter issuer: every token up to its last one was issued (`None`: none yet).
    IssuedUpTo(Option<FencingToken>),
    /// A lease issuer whose only current token is the live lease's (`None`: no live lease), as
    /// etcd's lock key and its `create_revision`.
    LiveLease(Option<FencingToken>),
}

impl fmt::Display for IssuerView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IssuerView::Unchecked => f.write_str("issuer not checked"),
            IssuerView::IssuedUpTo(Some(last)) => write!(f, "last issued token {last}"),
            IssuerView::IssuedUpTo(None) => f.write_str("no token issued yet"),
            IssuerView::LiveLease(Some(token)) => write!(f, "live lease token {token}"),
            IssuerView::LiveLease(None) => f.write_str("no live lease"),
        }
    }
}

/// The checks a resource runs on a token after the acceptance rule admitted it: tokens its
/// issuer vouches for, within a bounded step.
///
/// The acceptance rule lets any token above the mark in, so one caller presenting an invented
/// token (`u64::MAX` at worst) fences every future owner out of a domain for good: its issuer
/// can never issue above it. Two checks close that, both in the resource's atomic step, after
/// the token rule:
///
/// - **issued only**, where the resource sees the domain's issuer (a Redis sequence in the
///   domain's hash slot, a PostgreSQL counter row in the same transaction, an etcd lock key):
///   a token the issuer never issued is refused with [`FenceError::Unissued`];
/// - **a bounded step**, where the resource runs code but the issuer may be elsewhere: a token
///   more than `max_step` above the mark (above zero for a domain without one) is refused with
///   [`FenceError::TokenTooFar`], so a runaway token cannot burn the domain's token space.
///
/// Both are off unless configured on the adapter: the right step depends on the issuer (a
/// counter grows by one per acquisition; an etcd revision by every write in the cluster), and a
/// wrong default would refuse legitimate owners. These checks stop buggy and runaway callers
/// that go through Fence; a caller with direct write access to the resource is stopped only by
/// the resource's own access control (ACLs, grants, IAM policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenBounds {
    /// Refuse tokens more than this above the mark (`None`: no bound).
    pub max_step: Option<NonZeroU64>,
    /// The issuer as the resource sees it.
    pub issuer: IssuerView,
}

impl TokenBounds {
    /// No check beyond the acceptance rule.
    pub const OPEN: TokenBounds = TokenBounds {
        max_step: None,
        issuer: IssuerView::Unchecked,
    };

    /// Checks with a step bound and an issuer view.
    pub const fn new(max_step: Option<NonZeroU64>, issuer: IssuerView) -> Self {
        TokenBounds { max_step, issuer }
    }

    /// Checks `presented`, already admitted by the token rule against `high_water_mark`:
    /// refused with [`FenceError::Unissued`] when the issuer does not vouch for it, with
    /// [`FenceError::TokenTooFar`] when it is more than `max_step` above the mark.
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use fence_core::raw::TokenBounds;
    /// use fence_core::{Domain, FencingToken, IssuerView};
    /// let d = Domain::new("orders")?;
    /// let t = |n| FencingToken::new(n);
    /// let issued = TokenBounds::new(None, IssuerView::IssuedUpTo(Some(t(7)?)));
    /// assert!(issued.check(&d, Some(t(5)?), t(7)?).is_ok());
    /// assert!(issued.check(&d, Some(t(5)?), t(8)?).is_err());
    /// let bounded = TokenBounds::new(NonZeroU64::new(10), IssuerView::Unchecked);
    /// assert!(bounded.check(&d, Some(t(5)?), t(15)?).is_ok());
    /// assert!(bounded.check(&d, Some(t(5)?), FencingToken::MAX).is_err());
    /// assert!(bounded.check(&d, None, t(11)?).is_err());
    /// # Ok::<(), fence_core::InvalidInput>(())
    /// ```
    pub fn check(
        &self,
        domain: &Domain,
        high_water_mark: Option<FencingToken>,
        presented: FencingToken,
    ) -> Result<(), FenceError> {
        let vouched = match self.issuer {
            IssuerView::Unchecked => true,
            IssuerView::IssuedUpTo(last) => last.is_some_and(|last| presented <= last),
            IssuerView::LiveLease(live) => live == Some(presented),
        };
        if !vouched {
            return Err(FenceError::Unissued {
                domain: domain.clone(),
                presented,
                issuer: self.issuer,
            });
        }
        if let Some(max_step) = self.max_step {
            let base = high_water_mark.map_or(0, FencingToken::get);
            if presented.get().saturating_sub(base) > max_step.get() {
                return Err(FenceError::TokenTooFar {
                    domain: domain.clone(),
                    presented,
                    current: high_water_mark,
                    max_step,
                });
            }
        }
        Ok(())
    }
}

/// The admission settings a resource can hold for itself, so that every client obeys them,
/// not only the ones built with them: refuse tokens more than `max_step` above the mark, and
/// (`issued_only`) tokens the resource's own issuer never handed out. A client's own settings
/// and the resource's combine into the tighter of the two ([`BoundsConfig::tighter`]).
///
/// ```
/// use std::num::NonZeroU64;
/// use fence_core::BoundsConfig;
/// let client = BoundsConfig::new(NonZeroU64::new(1000), false);
/// let resource = BoundsConfig::new(NonZeroU64::new(10), true);
/// assert_eq!(client.tighter(resource), BoundsConfig::new(NonZeroU64::new(10), true));
/// assert_eq!(BoundsConfig::NONE.tighter(client), client);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BoundsConfig {
    /// Refuse tokens more than this above the mark (`None`: no bound).
    pub max_step: Option<NonZeroU64>,
    /// Accept only tokens the resource's own issuer handed out.
    pub issued_only: bool,
}

impl BoundsConfig {
    /// No setting: the acceptance rule alone.
    pub const NONE: BoundsConfig = BoundsConfig {
        max_step: None,
        issued_only: false,
    };

    /// A step bound (`None`: none) and whether only issued tokens are accepted.
    pub const fn new(max_step: Option<NonZeroU64>, issued_only: bool) -> Self {
        BoundsConfig {
            max_step,
            issued_only,
        }
    }

    /// The tighter of two settings: the smaller step bound, issued-only if either is.
    pub fn tighter(self, other: BoundsConfig) -> BoundsConfig {
        let max_step = match (self.max_step, other.max_step) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        BoundsConfig::new(max_step, self.issued_only || other.issued_only)
    }

    /// The checks these settings ask for, with the issuer as the resource sees it (ignored
    /// unless `issued_only`).
    pub fn with_issuer(self, issuer: IssuerView) -> TokenBounds {
        let issuer = if self.issued_only {
            issuer
        } else {
            IssuerView::Unchecked
        };
        TokenBounds::new(self.max_step, issuer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    fn d() -> Domain {
        Domain::new("d").unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn open_admits_everything_the_rule_admitted() {
        assert!(TokenBounds::OPEN
            .check(&d(), None, FencingToken::MAX)
            .is_ok());
        assert!(TokenBounds::OPEN
            .check(&d(), Some(t(1)), FencingToken::MAX)
            .is_ok());
    }

    #[test]
    fn a_counter_vouches_for_every_token_up_to_its_last() {
        let issued = |last| TokenBounds::new(None, IssuerView::IssuedUpTo(last));
        assert!(issued(Some(t(9))).check(&d(), None, t(1)).is_ok());
        assert!(issued(Some(t(9))).check(&d(), None, t(9)).is_ok());
        let refused = issued(Some(t(9))).check(&d(), None, t(10));
        assert!(matches!(
            refused,
            Err(FenceError::Unissued { presented, issuer: IssuerView::IssuedUpTo(Some(last)), .. })
                if presented == t(10) && last == t(9)
        ));
        assert!(issued(None).check(&d(), None, t(1)).is_err());
    }

    #[test]
    fn a_lease_vouches_only_for_its_own_token() {
        let live = |token| TokenBounds::new(None, IssuerView::LiveLease(token));
        assert!(live(Some(t(40))).check(&d(), None, t(40)).is_ok());
        assert!(live(Some(t(40))).check(&d(), None, t(39)).is_err());
        assert!(live(Some(t(40))).check(&d(), None, t(41)).is_err());
        assert!(live(None).check(&d(), None, t(40)).is_err());
    }

    #[test]
    fn the_step_is_measured_from_the_mark_or_from_zero() {
        let bounded = TokenBounds::new(NonZeroU64::new(100), IssuerView::Unchecked);
        assert!(bounded.check(&d(), None, t(100)).is_ok());
        assert!(bounded.check(&d(), Some(t(50)), t(150)).is_ok());
        let refused = bounded.check(&d(), Some(t(50)), t(151));
        assert!(matches!(
            refused,
            Err(FenceError::TokenTooFar { current: Some(mark), max_step, .. })
                if mark == t(50) && max_step.get() == 100
        ));
        assert!(bounded.check(&d(), None, t(101)).is_err());
        assert!(bounded
            .check(&d(), Some(t(u64::MAX - 1)), FencingToken::MAX)
            .is_ok());
    }

    #[test]
    fn refusals_name_the_domain_and_are_not_retryable() {
        let unissued = TokenBounds::new(None, IssuerView::LiveLease(None))
            .check(&d(), None, t(3))
            .err();
        let too_far = TokenBounds::new(NonZeroU64::new(1), IssuerView::Unchecked)
            .check(&d(), Some(t(1)), t(3))
            .err();
        for error in [unissued, too_far].into_iter().flatten() {
            assert!(!error.is_retryable() && !error.is_fenced(), "{error}");
            assert!(error.to_string().contains("domain `d`"), "{error}");
        }
    }
}
