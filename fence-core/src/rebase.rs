//! An operator's recovery of a domain whose mark was pushed to a token no one issued.

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;

use crate::token::validate_text;
use crate::{Domain, FenceError, FencingToken, InvalidInput, IssuerView, OwnerId};

/// A resource whose marks an operator can re-base (see [`Rebase`]).
#[async_trait]
pub trait Rebaser: Send + Sync {
    /// Lowers `domain`'s mark as `rebase` says, in one atomic step that checks the reviewed
    /// mark (and the issuer, where the resource sees it) and records the re-base; refused with
    /// [`FenceError::RebaseRefused`], changing nothing, when a check fails.
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError>;

    /// The re-bases of `domain`, oldest first.
    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError>;
}

/// The longest reason a re-base records, in bytes.
pub const MAX_REBASE_REASON_BYTES: usize = 512;

/// A reviewed re-base of one domain's mark.
///
/// A forged or runaway token accepted before [`crate::raw::TokenBounds`] guarded the domain leaves a
/// mark its issuer cannot reach (`u64::MAX` exhausts it): every future owner is fenced out. A
/// re-base lowers the mark to a token the operator chose after review, in one atomic step at
/// the resource that also records who did it and why:
///
/// - the mark must still be the one the operator reviewed (`expected_mark`): a re-base never
///   undoes a write it did not see;
/// - the new mark is below the current one, and, where the resource sees the domain's issuer,
///   never below its last issued token (a lower request is raised to it): every token ever
///   issued stays fenced except the newest, whose holder is the current owner. Issuers floored at the mark (Redis, PostgreSQL)
///   issue above the new mark; others (memory, etcd revisions) must reach it, so re-base to
///   their last token. Where the resource sees no issuer state for the domain, the operator
///   checks the new mark against the issuer and says so ([`Rebase::issuer_elsewhere`]);
/// - turn on [`crate::raw::TokenBounds`] for the domain before re-basing, or the caller that forged
///   the mark can forge it again;
/// - an entry written with a token above the new mark keeps its value; its writer token is
///   lowered to the new mark (the audit record keeps the mark it replaced).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rebase {
    to: FencingToken,
    expected_mark: FencingToken,
    operator: OwnerId,
    reason: String,
    issuer_elsewhere: bool,
}

impl Rebase {
    /// Lowers the mark from `expected_mark` (what the operator reviewed) to `to`, recorded as
    /// done by `operator` for `reason` (1 to [`MAX_REBASE_REASON_BYTES`] bytes, no control
    /// characters).
    ///
    /// ```
    /// use fence_core::{FencingToken, OwnerId, Rebase};
    /// let rebase = Rebase::new(
    ///     FencingToken::new(41)?,
    ///     FencingToken::MAX,
    ///     OwnerId::new("ops:alice")?,
    ///     "INC-7: a test harness wrote u64::MAX",
    /// )?;
    /// assert_eq!(rebase.to().get(), 41);
    /// assert!(Rebase::new(FencingToken::MAX, FencingToken::MAX, OwnerId::new("a")?, "x").is_err());
    /// # Ok::<(), fence_core::InvalidInput>(())
    /// ```
    pub fn new(
        to: FencingToken,
        expected_mark: FencingToken,
        operator: OwnerId,
        reason: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        let reason = reason.into();
        validate_text("re-base reason", &reason, MAX_REBASE_REASON_BYTES)?;
        if to >= expected_mark {
            return Err(InvalidInput::Configuration(format!(
                "a re-base lowers the mark: {to} is not below {expected_mark}"
            )));
        }
        Ok(Rebase {
            to,
            expected_mark,
            operator,
            reason,
            issuer_elsewhere: false,
        })
    }

    /// Declares that the domain's tokens come from an issuer the resource does not see (etcd
    /// tokens on a Redis fence, say), and that `to` was checked against it: a resource that
    /// finds no issuer state of its own for a domain with a mark then re-bases anyway. Without
    /// it, such a re-base is refused: the missing state may be a lost sequence whose next
    /// tokens would repeat ones already issued.
    pub fn issuer_elsewhere(mut self) -> Self {
        self.issuer_elsewhere = true;
        self
    }

    /// The new mark.
    pub fn to(&self) -> FencingToken {
        self.to
    }

    /// The mark the operator reviewed.
    pub fn expected_mark(&self) -> FencingToken {
        self.expected_mark
    }

    /// Who re-bases.
    pub fn operator(&self) -> &OwnerId {
        &self.operator
    }

    /// Why.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// True when the operator declared the domain's issuer to be one the resource does not
    /// see ([`Rebase::issuer_elsewhere`]).
    pub fn is_issuer_elsewhere(&self) -> bool {
        self.issuer_elsewhere
    }

    /// Decides the re-base on what the resource holds, read in the step that applies it (the
    /// domain's `mark` and its issuer as the resource sees it), and returns the new mark:
    /// [`Rebase::to`], raised to the issuer's last token when below it, so no holder of an
    /// issued token older than the newest writes again.
    pub fn decide(
        &self,
        domain: &Domain,
        mark: Option<FencingToken>,
        issuer: IssuerView,
    ) -> Result<FencingToken, FenceError> {
        let refused = |detail: String| FenceError::RebaseRefused {
            domain: domain.clone(),
            detail,
        };
        if mark != Some(self.expected_mark) {
            return Err(refused(match mark {
                Some(mark) => format!(
                    "the mark is {mark}, not the reviewed {}",
                    self.expected_mark
                ),
                None => format!(
                    "the domain has no mark, not the reviewed {}",
                    self.expected_mark
                ),
            }));
        }
        let floor = match issuer {
            IssuerView::IssuedUpTo(Some(last)) | IssuerView::LiveLease(Some(last)) => Some(last),
            IssuerView::IssuedUpTo(None) if !self.issuer_elsewhere => {
                return Err(refused(
                    "the resource holds no issuer state for this domain (lost, or its tokens \
                     come from another issuer): check the new mark against the issuer and \
                     declare it with `Rebase::issuer_elsewhere`"
                        .to_owned(),
                ))
            }
            _ => None,
        };
        let to = floor.map_or(self.to, |floor| self.to.max(floor));
        if to >= self.expected_mark {
            return Err(refused(format!(
                "the issuer's last token {to} is not below the mark {}: nothing to re-base",
                self.expected_mark
            )));
        }
        Ok(to)
    }
}

/// A re-base as the resource recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebaseRecord {
    /// The mark before.
    pub from: FencingToken,
    /// The mark after.
    pub to: FencingToken,
    /// Who re-based.
    pub operator: OwnerId,
    /// Why.
    pub reason: String,
    /// When, by the resource's clock where it has one.
    pub at: SystemTime,
}

impl RebaseRecord {
    /// The record of `rebase`, which set the mark to `to` (what [`Rebase::decide`] returned).
    pub fn new(rebase: &Rebase, to: FencingToken, at: SystemTime) -> Self {
        RebaseRecord {
            from: rebase.expected_mark,
            to,
            operator: rebase.operator.clone(),
            reason: rebase.reason.clone(),
            at,
        }
    }
}

impl RebaseRecord {
    /// The record as one line of text, as resources store it:
    /// `<unix ms>\t<from>\t<to>\t<operator>\t<reason>` (no field holds a tab or a newline).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use fence_core::{FencingToken, OwnerId, Rebase, RebaseRecord};
    /// let rebase = Rebase::new(FencingToken::new(7)?, FencingToken::MAX, OwnerId::new("ops")?, "INC-7")?;
    /// let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1500);
    /// let record = RebaseRecord::new(&rebase, rebase.to(), at);
    /// assert_eq!(record.to_line(), "1500\t18446744073709551615\t7\tops\tINC-7");
    /// assert_eq!(RebaseRecord::parse_line(&record.to_line())?, record);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_line(&self) -> String {
        let ms = self
            .at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!(
            "{ms}\t{}\t{}\t{}\t{}",
            self.from, self.to, self.operator, self.reason
        )
    }

    /// Parses [`RebaseRecord::to_line`]'s form; the error says what is wrong.
    pub fn parse_line(line: &str) -> Result<Self, String> {
        let mut fields = line.splitn(5, '\t');
        let mut next = |what: &str| fields.next().ok_or_else(|| format!("no {what}"));
        let (at, from, to, operator, reason) = (
            next("time")?,
            next("previous mark")?,
            next("new mark")?,
            next("operator")?,
            next("reason")?,
        );
        let at: u64 = at.parse().map_err(|_| format!("time `{at}`"))?;
        let from: FencingToken = from.parse().map_err(|e| format!("previous mark: {e}"))?;
        let to: FencingToken = to.parse().map_err(|e| format!("new mark: {e}"))?;
        let operator = OwnerId::new(operator).map_err(|e| e.to_string())?;
        let rebase = Rebase::new(to, from, operator, reason).map_err(|e| e.to_string())?;
        Ok(RebaseRecord::new(
            &rebase,
            to,
            SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(at),
        ))
    }
}

impl fmt::Display for RebaseRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mark {} → {} by `{}`: {}",
            self.from, self.to, self.operator, self.reason
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    fn rebase(to: u64, expected: u64) -> Rebase {
        let operator = OwnerId::new("ops").unwrap_or_else(|_| unreachable!());
        Rebase::new(t(to), t(expected), operator, "forged").unwrap_or_else(|_| unreachable!())
    }

    fn d() -> Domain {
        Domain::new("d").unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn only_the_reviewed_mark_is_lowered() {
        let r = rebase(10, u64::MAX);
        let max = Some(FencingToken::MAX);
        assert_eq!(r.decide(&d(), max, IssuerView::Unchecked).ok(), Some(t(10)));
        let moved = r.decide(&d(), Some(t(u64::MAX - 1)), IssuerView::Unchecked);
        assert!(
            matches!(moved, Err(FenceError::RebaseRefused { .. })),
            "{moved:?}"
        );
        assert!(r.decide(&d(), None, IssuerView::Unchecked).is_err());
    }

    #[test]
    fn never_below_what_the_issuer_issued() {
        let r = rebase(10, 100);
        let at = |last| IssuerView::IssuedUpTo(Some(t(last)));
        let mark = Some(t(100));
        assert_eq!(r.decide(&d(), mark, at(10)).ok(), Some(t(10)));
        assert_eq!(r.decide(&d(), mark, at(9)).ok(), Some(t(10)));
        assert_eq!(
            r.decide(&d(), mark, at(42)).ok(),
            Some(t(42)),
            "raised to the issuer"
        );
        let passed = r.decide(&d(), mark, at(100));
        assert!(
            passed
                .as_ref()
                .is_err_and(|e| e.to_string().contains("nothing to re-base")),
            "{passed:?}"
        );
        let lost = r.decide(&d(), mark, IssuerView::IssuedUpTo(None));
        assert!(
            lost.as_ref()
                .is_err_and(|e| e.to_string().contains("no issuer state")),
            "{lost:?}"
        );
        let declared = r.clone().issuer_elsewhere();
        assert_eq!(
            declared
                .decide(&d(), mark, IssuerView::IssuedUpTo(None))
                .ok(),
            Some(t(10))
        );
    }

    #[test]
    fn bad_requests_are_refused_before_io() {
        let op = || OwnerId::new("ops").unwrap_or_else(|_| unreachable!());
        assert!(Rebase::new(t(5), t(5), op(), "same").is_err());
        assert!(Rebase::new(t(6), t(5), op(), "raise").is_err());
        assert!(Rebase::new(t(4), t(5), op(), "").is_err());
        assert!(Rebase::new(t(4), t(5), op(), "a\nb").is_err());
        assert!(Rebase::new(t(4), t(5), op(), "x".repeat(513)).is_err());
    }
}
