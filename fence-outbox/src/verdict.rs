//! The relay's verdict on a head entry, as pure functions: what the relay runs (and what
//! fence-model's relay model runs, so the checked protocol is this one, not a copy).

use fence_core::raw::rule;
use fence_core::{Domain, EqualTokenPolicy, FenceError, FencingToken};

use crate::entry::Settlement;
use crate::sink::SinkError;

/// Whether relay token `relay` may take a step on `domain`, whose newest relay token is
/// `newest`: fence-core's rule with the same-owner policy (a relay retries its own steps), so a
/// relay older than one that stepped there is `Fenced`. SQL stores run it in the step's
/// transaction, under the domain's row lock, then record `relay` as the newest.
///
/// ```
/// use fence_core::{Domain, FencingToken};
/// use fence_outbox::verdict;
/// let d = Domain::new("order-7")?;
/// let (older, newer) = (FencingToken::new(3)?, FencingToken::new(4)?);
/// assert!(verdict::relay_may_step(&d, None, older).is_ok());
/// assert!(verdict::relay_may_step(&d, Some(newer), newer).is_ok());
/// assert!(verdict::relay_may_step(&d, Some(newer), older).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn relay_may_step(
    domain: &Domain,
    newest: Option<FencingToken>,
    relay: FencingToken,
) -> Result<(), FenceError> {
    rule::check_token(domain, newest, relay, EqualTokenPolicy::SameOwner)
}

/// Before an attempt on a head entry that has used `attempts` of `max_attempts`: a dead letter
/// when none is left (a crash came between the last attempt and its verdict), with the last
/// recorded failure; `None` when the entry may be tried.
///
/// ```
/// use fence_outbox::verdict;
/// use fence_outbox::Settlement;
/// assert_eq!(verdict::before_attempt(2, None, 8), None);
/// assert!(matches!(
///     verdict::before_attempt(8, Some("HTTP 503"), 8),
///     Some(Settlement::DeadLetter { error }) if error == "HTTP 503"
/// ));
/// ```
pub fn before_attempt(
    attempts: u32,
    last_error: Option<&str>,
    max_attempts: u32,
) -> Option<Settlement> {
    (attempts >= max_attempts).then(|| Settlement::DeadLetter {
        error: match last_error {
            Some(error) => error.to_owned(),
            None => format!("{max_attempts} attempts used"),
        },
    })
}

/// After attempt `attempt` (from 1) of `max_attempts`, the settlement the sink's `answer`
/// calls for: delivered, a retry, or a dead letter (a permanent failure, or the last allowed
/// attempt failing).
///
/// ```
/// use fence_outbox::verdict;
/// use fence_outbox::{Settlement, SinkError};
/// assert_eq!(verdict::after_attempt(&Ok(()), 1, 8), Settlement::Delivered);
/// let busy = Err(SinkError::retryable("HTTP 503"));
/// assert!(matches!(verdict::after_attempt(&busy, 1, 8), Settlement::Retry { .. }));
/// assert!(matches!(verdict::after_attempt(&busy, 8, 8), Settlement::DeadLetter { .. }));
/// ```
pub fn after_attempt(
    answer: &Result<(), SinkError>,
    attempt: u32,
    max_attempts: u32,
) -> Settlement {
    match answer {
        Ok(()) => Settlement::Delivered,
        Err(SinkError::Permanent { reason }) => Settlement::DeadLetter {
            error: reason.clone(),
        },
        Err(SinkError::Retryable { reason, .. }) if attempt >= max_attempts => {
            Settlement::DeadLetter {
                error: format!("{reason} (attempt {attempt} of {max_attempts})"),
            }
        }
        Err(SinkError::Retryable { reason, .. }) => Settlement::Retry {
            error: reason.clone(),
        },
    }
}
