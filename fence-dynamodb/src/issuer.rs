//! `DynamoDbIssuer`: tokens from a counter attribute on the domain's item, floored at its mark.

use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Backoff, Domain, FenceError, FencingToken, Operation, TokenIssuer};

use crate::error::{backend_error, DynamoDbFenceError, Failure, BACKEND};
use crate::expr::Expr;
use crate::item::{attr, number, Stored};
use crate::table::without_key;
use crate::DynamoDb;

/// Conditional updates an issue or an acquisition tries before giving up to contention.
pub(crate) const MAX_ATTEMPTS: u32 = 64;

/// Issues each token as the next value of the domain's counter (`ctr` on its item), raised by a
/// conditional update that also checks the counter read and the domain's mark: tokens grow
/// strictly and consecutively per domain, never fall to or below a mark the item holds (a
/// counter lost or restored from an old backup restarts above the mark), and share one
/// sequence with [`crate::DynamoDbLeases`] of the same table and namespace. An issue whose
/// answer was lost at most skips a token: a retry can help.
#[derive(Clone, Debug)]
pub struct DynamoDbIssuer {
    dynamodb: DynamoDb,
}

impl DynamoDbIssuer {
    pub(crate) fn new(dynamodb: DynamoDb) -> Self {
        DynamoDbIssuer { dynamodb }
    }
}

/// The token after the domain's counter and mark, whichever is greater; `TokenExhausted` when
/// that is `u64::MAX`.
pub(crate) fn next_token(domain: &Domain, stored: &Stored) -> Result<FencingToken, FenceError> {
    let floor = stored.counter.max(stored.mark).map_or(0, FencingToken::get);
    floor
        .checked_add(1)
        .and_then(|next| FencingToken::new(next).ok())
        .ok_or_else(|| FenceError::TokenExhausted {
            domain: domain.clone(),
        })
}

/// The condition of raising the counter to `next` on `stored`: the counter is still the one
/// read, and the mark (if any) is below `next`.
pub(crate) fn raise_condition(expr: &mut Expr, stored: &Stored, next: FencingToken) -> String {
    let counter = expr.counter_is(stored.counter);
    let mark = expr.name(attr::MARK);
    let next = expr.value("next", number(next.get()));
    format!("{counter} AND (attribute_not_exists({mark}) OR {mark} < {next})")
}

/// The pause after the `attempt`-th lost conditional update of an issue or acquisition.
pub(crate) fn pause(attempt: u32) -> Duration {
    Backoff::new(Duration::from_millis(2), Duration::from_millis(100)).delay(attempt)
}

#[async_trait]
impl TokenIssuer for DynamoDbIssuer {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let dynamodb = &self.dynamodb;
        let mut stored = dynamodb.read(domain, Operation::Issue).await?;
        for attempt in 0..MAX_ATTEMPTS {
            let next = next_token(domain, &stored)?;
            let mut expr = Expr::default();
            let condition = raise_condition(&mut expr, &stored, next);
            let update = format!(
                "SET {} = {}",
                expr.name(attr::COUNTER),
                expr.value("next", number(next.get()))
            );
            let failure = match dynamodb.update(domain, &expr, (condition, update)).await {
                Ok(()) => return Ok(next),
                Err(failure) => failure,
            };
            stored = match failure {
                Failure::Condition(Some(item)) => Stored::decode(domain, Some(&without_key(item)))?,
                Failure::Condition(None) => dynamodb.read(domain, Operation::Issue).await?,
                Failure::NotApplied(_) => {
                    tokio::time::sleep(pause(attempt)).await;
                    stored
                }
                // A lost answer at most skips a token: never reported as ambiguous.
                other => return Err(other.into_fence_error(domain, Operation::Issue, false)),
            };
        }
        Err(backend_error(
            Some(domain),
            DynamoDbFenceError::Contention {
                attempts: MAX_ATTEMPTS,
            },
        ))
    }
}
