//! A claim: the domain's producer is opened (which fences the producers of older tokens),
//! decided on the ledger it read, and the raised mark committed in a transaction of its own.

use fence_core::raw::pipeline::{self, ClaimDecision};
use fence_core::{Claimed, Domain, EqualTokenPolicy, FenceError, FencingToken, Operation};

use crate::error::{backend, fenced_by_another_producer, permanent, KafkaFenceError, TxnFailure};
use crate::fence::KafkaFence;
use crate::ledger::partition_for;
use crate::txn::{pause, Committed};

impl KafkaFence {
    pub(crate) async fn claim_now(
        &self,
        domain: &Domain,
        token: FencingToken,
    ) -> Result<Claimed, FenceError> {
        self.inner
            .holders
            .check_known(domain, token, EqualTokenPolicy::SameOwner)?;
        self.record_layout().await?;
        let slot = self.inner.holders.slot(domain, token);
        let mut guard = slot.lock().await;
        let ledger_partition = partition_for(domain.as_str(), self.ledger_partitions().await?);
        let attempts = self.inner.aborted_retries + 1;
        let mut last = None;
        for attempt in 0..attempts {
            *guard = None;
            if attempt > 0 || self.decides_before_opening() {
                // Lost to a concurrent claimer (or bounded): if a higher mark is committed now,
                // or the token is too far above it, stop without initialising a producer,
                // which would only fence that claimer in turn.
                let committed = self.read_ledger(domain).await?;
                if let Err(fenced) =
                    pipeline::decide_claim(domain, committed.hwm, token, self.inner.bounds)
                {
                    drop(guard);
                    self.inner.holders.forget(domain, token);
                    return Err(fenced);
                }
            }
            let mut holder = self.open(domain).await?;
            let decision =
                match pipeline::decide_claim(domain, holder.state.hwm, token, self.inner.bounds) {
                    Ok(decision) => decision,
                    Err(fenced) => {
                        drop(guard);
                        self.inner.holders.forget(domain, token);
                        return Err(fenced);
                    }
                };
            if let ClaimDecision::Raise(_) = decision {
                let mut next = holder.state.clone();
                next.hwm = Some(token);
                match self
                    .transact(
                        &holder.producer,
                        vec![self.ledger_record(domain, ledger_partition, &next)],
                    )
                    .await
                {
                    Ok(Committed::Kept) => {
                        holder.state = next;
                        self.inner.holders.note_mark(domain, Some(token));
                    }
                    Ok(Committed::DespiteRefusal) => {
                        // Claimed, but by a fenced producer: the next append opens another.
                        self.inner.holders.note_mark(domain, Some(token));
                        return Ok(decision.claimed());
                    }
                    Err(TxnFailure::Fenced(error) | TxnFailure::Aborted(error))
                        if !permanent(&error) =>
                    {
                        // Most often another claimer initialised in between: start over, after
                        // a pause.
                        last = Some(error);
                        pause(self.inner.backoff, attempt).await;
                        continue;
                    }
                    Err(failure) => return Err(self.txn_error(domain, Operation::Claim, failure)),
                }
            }
            *guard = Some(holder);
            return Ok(decision.claimed());
        }
        drop(guard);
        self.inner.holders.forget(domain, token);
        Err(match last {
            Some(error) if !fenced_by_another_producer(&error) => backend(Some(domain), error),
            _ => backend(Some(domain), KafkaFenceError::ClaimContended { attempts }),
        })
    }
}
