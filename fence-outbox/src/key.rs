//! Idempotency keys: one per effect, derived from where it was recorded.

use std::fmt;

use fence_core::{Domain, Fencing, FencingToken, InvalidInput, OperationId};

use crate::error::OutboxError;

/// The idempotency key of an effect: `<domain>:<token>:<op id>:<effect index>`, with domain and
/// op id in their escaped form (`[A-Za-z0-9._-]` and `%XX`), so distinct effects never share a
/// key and every key is a valid HTTP header value.
///
/// The same transition retried with the same op id yields the same keys, so a receiver that
/// deduplicates by key (as payment APIs do) applies each effect once.
///
/// ```
/// use fence_core::{Domain, FencingToken, OperationId};
/// use fence_outbox::IdempotencyKey;
/// let key = IdempotencyKey::new(
///     &Domain::new("order/42")?,
///     FencingToken::new(7)?,
///     &OperationId::new("pay")?,
///     0,
/// );
/// assert_eq!(key.as_str(), "order%2F42:7:pay:0");
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key of effect `index` of the transition (`domain`, `token`, `op_id`).
    pub fn new(domain: &Domain, token: FencingToken, op_id: &OperationId, index: usize) -> Self {
        IdempotencyKey(format!(
            "{}:{}:{}:{}",
            domain.escaped(),
            token,
            op_id.escaped(),
            index
        ))
    }

    /// The keys of a transition's `count` effects, in order, from its fencing header, which must
    /// carry an operation id (every outbox transition's constructor sets one): without one the
    /// transition is refused, before any I/O.
    pub fn of_transition(fencing: &Fencing, count: usize) -> Result<Vec<Self>, InvalidInput> {
        let op_id = fencing.op_id().ok_or_else(|| {
            InvalidInput::Configuration(format!(
                "an outbox transition on domain `{}` needs an operation id",
                fencing.domain()
            ))
        })?;
        Ok((0..count)
            .map(|i| Self::new(fencing.domain(), fencing.token(), op_id, i))
            .collect())
    }

    /// The op id the effects a transition records in a fenced transaction are keyed by:
    /// without one they would have no key (and a retried transition would record them again),
    /// so recording is refused, before any I/O.
    pub fn op_id_of<'a>(
        domain: &Domain,
        op_id: Option<&'a OperationId>,
    ) -> Result<&'a OperationId, OutboxError> {
        op_id.ok_or_else(|| {
            OutboxError::Configuration(format!(
                "a transition on domain `{domain}` records effects only with an op id \
                 (TransactionRequest::with_op_id)"
            ))
        })
    }

    /// A key read back from storage, as it was recorded (for [`OutboxStore`] implementations).
    ///
    /// [`OutboxStore`]: crate::OutboxStore
    pub fn from_recorded(text: String) -> Self {
        IdempotencyKey(text)
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.0)
    }
}

#[cfg(test)]
mod transition_keys {
    use super::*;

    #[test]
    fn a_transition_without_an_op_id_gets_no_keys_but_an_error() -> Result<(), InvalidInput> {
        let fencing = Fencing::new(Domain::new("order/42")?, FencingToken::new(7)?);
        let refused = IdempotencyKey::of_transition(&fencing, 2);
        assert!(
            matches!(&refused, Err(InvalidInput::Configuration(why)) if why.contains("order/42")),
            "{refused:?}"
        );
        let keys = IdempotencyKey::of_transition(&fencing.with_op_id(OperationId::new("pay")?), 2)?;
        let keys: Vec<&str> = keys.iter().map(IdempotencyKey::as_str).collect();
        assert_eq!(keys, ["order%2F42:7:pay:0", "order%2F42:7:pay:1"]);
        Ok(())
    }
}
