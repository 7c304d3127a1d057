//! An append: decided on the committed ledger before a producer is opened when that is due,
//! decided again under the domain's producer, and committed with the ledger in one transaction.

use fence_core::raw::pipeline::{self, Decision};
use fence_core::raw::OpRecord;
use fence_core::{
    AppendOutcome, AppendRequest, Appended, EqualTokenPolicy, FenceError, InvalidInput, Operation,
};

use crate::error::{
    backend, fenced_by_another_producer, permanent, KafkaFenceError, TxnFailure, BACKEND,
};
use crate::fence::KafkaFence;
use crate::ledger::{partition_for, LedgerState};
use crate::partitioning::Partitioning;
use crate::record::is_fence_header;
use crate::txn::{pause, Committed, Outgoing};

/// Where an append's records go: the domain's data partition (`None`: each record's key
/// chooses, and records carry sequence numbers) and its ledger partition.
#[derive(Clone, Copy)]
struct BatchLayout {
    data_partition: Option<i32>,
    ledger_partition: i32,
}

/// What the committed ledger says of an append before a producer is opened.
enum LedgerDecision {
    /// Applied before: its first outcome.
    Replay(Appended),
    /// Open a producer and decide again under it.
    Open,
    /// Refused.
    Refused(FenceError),
}

impl KafkaFence {
    pub(crate) async fn append_now(
        &self,
        request: &AppendRequest,
    ) -> Result<AppendOutcome, FenceError> {
        let domain = request.domain();
        let token = request.token();
        pipeline::validate_append(request, Some(self.inner.max_batch_bytes))?;
        check_headers(request)?;
        self.record_layout().await?;
        let strict = request.policy() == EqualTokenPolicy::Strict;
        // Record-key partitioning leaves each record's partition to the producer.
        let layout = BatchLayout {
            data_partition: match self.inner.partitioning {
                Partitioning::RecordKey => None,
                _ => Some(self.data_partition(domain).await?),
            },
            ledger_partition: partition_for(domain.as_str(), self.ledger_partitions().await?),
        };
        let slot = self.inner.holders.slot(domain, token);
        let mut guard = slot.lock().await;
        let mut last = None;
        for attempt in 0..=self.inner.aborted_retries {
            // Strict appends need a fresh look at the ledger every time.
            let fresh = strict || guard.is_none();
            if fresh {
                *guard = None;
                let stale = self
                    .inner
                    .holders
                    .check_known(domain, token, request.policy())
                    .err();
                if stale.is_some() || self.decides_before_opening() {
                    match self.decide_on_ledger(request, stale).await? {
                        LedgerDecision::Replay(first) => {
                            return Ok(AppendOutcome::Duplicate(first))
                        }
                        LedgerDecision::Open => {}
                        LedgerDecision::Refused(refused) => {
                            drop(guard);
                            self.inner.holders.forget(domain, token);
                            return Err(refused);
                        }
                    }
                }
                *guard = Some(self.open(domain).await?);
            }
            // The holder is out of its slot while its transaction runs: if this future is
            // dropped meanwhile (a caller's timeout), the transaction runs on and may commit,
            // and the next attempt must not decide on the state from before it. It finds the
            // slot empty, opens a new producer (which settles the old one's transaction) and
            // reads the ledger.
            let Some(mut holder) = guard.take() else {
                continue;
            };
            let (appended, remember) = match pipeline::decide_append(
                request,
                holder.state.hwm,
                &holder.state.ops,
                self.inner.bounds,
            ) {
                Ok(Decision::Replay(first)) => {
                    *guard = Some(holder);
                    return Ok(AppendOutcome::Duplicate(first));
                }
                Ok(Decision::Apply { outcome, remember }) => (outcome, remember),
                Err(refused) => {
                    drop(guard);
                    self.inner.holders.forget(domain, token);
                    return Err(refused);
                }
            };
            let (records, next) = self.batch(request, &holder.state, remember, layout)?;
            match self.transact(&holder.producer, records).await {
                Ok(committed) => {
                    // A fenced producer is not kept: the next append opens another.
                    if committed == Committed::Kept {
                        holder.state = next;
                        *guard = Some(holder);
                    }
                    self.inner.holders.note_mark(domain, Some(token));
                    return Ok(AppendOutcome::Appended(appended));
                }
                Err(TxnFailure::Fenced(error) | TxnFailure::Aborted(error))
                    if !permanent(&error) =>
                {
                    // Nothing was written. Claim again with a new producer: a stale holder is
                    // refused there; the owner retries.
                    tracing::info!(domain = domain.as_str(), token = token.get(), attempt, %error, "transaction fenced or aborted; re-claiming");
                    last = Some(error);
                    pause(self.inner.backoff, attempt).await;
                }
                Err(failure) => return Err(self.txn_error(domain, Operation::Append, failure)),
            }
        }
        Err(match last {
            Some(error) if !fenced_by_another_producer(&error) => backend(Some(domain), error),
            _ => backend(
                Some(domain),
                KafkaFenceError::Aborted {
                    attempts: self.inner.aborted_retries + 1,
                },
            ),
        })
    }

    /// Decides an append on the committed ledger, read without opening a producer (opening one
    /// would abort the owner's transaction). With `stale`, the token is already known to be
    /// below a mark seen: a late retry still learns its first outcome, and anything else is
    /// refused, by the ledger or, if the ledger is below that mark (lost, reset), by the mark.
    async fn decide_on_ledger(
        &self,
        request: &AppendRequest,
        stale: Option<FenceError>,
    ) -> Result<LedgerDecision, FenceError> {
        let committed = self.read_ledger(request.domain()).await?;
        let decision =
            pipeline::decide_append(request, committed.hwm, &committed.ops, self.inner.bounds);
        Ok(match (decision, stale) {
            (Ok(Decision::Replay(first)), _) => LedgerDecision::Replay(first),
            (Ok(Decision::Apply { .. }), None) => LedgerDecision::Open,
            // A ledger below the mark already seen says nothing about the step: the mark seen
            // fences the token.
            (
                Ok(Decision::Apply { .. })
                | Err(FenceError::TokenTooFar { .. } | FenceError::Unissued { .. }),
                Some(stale),
            ) => LedgerDecision::Refused(stale),
            (Err(refused), _) => LedgerDecision::Refused(refused),
        })
    }

    /// The records of an accepted append (its data, then the ledger record when the mark or the
    /// remembered op ids change) and the ledger state once they commit.
    fn batch(
        &self,
        request: &AppendRequest,
        state: &LedgerState,
        remember: Option<OpRecord>,
        layout: BatchLayout,
    ) -> Result<(Vec<Outgoing>, LedgerState), FenceError> {
        let domain = request.domain();
        let mut next = state.clone();
        next.hwm = Some(request.token());
        if let Some(record) = remember {
            next.ops.remember(record, self.inner.op_id_retention);
        }
        // Under record-key partitioning each record takes the domain's next sequence number.
        let sequenced = layout.data_partition.is_none();
        let first_seq = next.seq.max(1);
        let after = u64::try_from(request.records().len())
            .ok()
            .and_then(|n| first_seq.checked_add(n))
            .ok_or_else(|| {
                FenceError::corrupt(BACKEND, domain, "the ledger's record sequence is exhausted")
            })?;
        let mut records: Vec<Outgoing> = request
            .records()
            .iter()
            .zip(first_seq..)
            .map(|(record, seq)| {
                let seq = sequenced.then_some(seq);
                let partition = layout.data_partition;
                self.data_record(
                    domain,
                    partition,
                    request.token(),
                    request.op_id(),
                    seq,
                    record,
                )
            })
            .collect();
        if sequenced {
            next.seq = after;
        }
        if next != *state {
            records.push(self.ledger_record(domain, layout.ledger_partition, &next));
        }
        Ok((records, next))
    }
}

/// Refuses user headers that would pose as fence headers: readers trust those to say which
/// domain and token wrote a record.
fn check_headers(request: &AppendRequest) -> Result<(), FenceError> {
    let reserved = request
        .records()
        .iter()
        .flat_map(|record| record.headers.iter())
        .find(|(name, _)| is_fence_header(name));
    match reserved {
        Some((name, _)) => Err(InvalidInput::ReservedName {
            domain: request.domain().clone(),
            what: "record header",
            name: name.clone(),
        }
        .into()),
        None => Ok(()),
    }
}
