//! The transaction runner: records ready to send, one blocking transaction on the blocking
//! pool, and how its failures become fence errors.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{Backoff, Domain, FenceError, FencingToken, Operation, OperationId, Record};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, FutureProducer, FutureRecord, Producer};

use crate::client::{blocking, committed_at, settle, TxnProducer};
use crate::context::{Acked, KafkaContext};
use crate::error::{backend, classify, permanent, KafkaFenceError, TxnFailure};
use crate::fence::KafkaFence;
use crate::ledger::LedgerState;
use crate::record::fence_headers;

/// A record ready to send inside a transaction.
pub(crate) struct Outgoing {
    topic: String,
    /// `None`: the producer's partitioner places it by its key.
    partition: Option<i32>,
    key: Option<Bytes>,
    value: Bytes,
    headers: Vec<(String, Bytes)>,
}

impl KafkaFence {
    pub(crate) fn ledger_record(
        &self,
        domain: &Domain,
        partition: i32,
        state: &LedgerState,
    ) -> Outgoing {
        Outgoing {
            topic: self.inner.ledger_topic.clone(),
            partition: Some(partition),
            key: Some(Bytes::copy_from_slice(domain.as_str().as_bytes())),
            value: Bytes::from(state.encode()),
            headers: Vec::new(),
        }
    }

    /// Sends `records` in one transaction on `producer`; when it writes the ledger, returns
    /// only once the commit's markers are in the ledger partition.
    ///
    /// The coordinator acknowledges a commit before the markers reach the partitions, and
    /// Apache Kafka skips the markers of a partition whose leader it cannot find when it
    /// reloads a transaction after a crash (measured: a single node killed right after a
    /// claim). The claim's record then stays undecided, and the mark it raised is not in force
    /// until it is. So a mark is acknowledged only once read_committed readers of the ledger
    /// partition see through to the end it had after the commit.
    pub(crate) async fn transact(
        &self,
        producer: &Arc<TxnProducer>,
        records: Vec<Outgoing>,
    ) -> Result<Committed, TxnFailure> {
        let ledger_partition = records
            .iter()
            .find(|r| r.topic == self.inner.ledger_topic)
            .and_then(|r| r.partition);
        let (producer, timeout) = (producer.clone(), self.inner.timeout);
        match blocking(move || run_transaction(&producer, records, timeout)).await {
            Ok(Ended::Committed) => {}
            Ok(Ended::Failed(failure)) => return Err(failure),
            Ok(Ended::RefusedAfterAcks { failure, acked }) => {
                return self.read_back(failure, &acked).await;
            }
            // The worker may have died after the commit was sent: the outcome is unknown.
            Err(worker) => {
                tracing::error!(%worker, "transaction worker failed");
                return Err(TxnFailure::Ambiguous(KafkaError::Canceled));
            }
        }
        let Some(partition) = ledger_partition else {
            return Ok(Committed::Kept);
        };
        let (clients, topic) = (self.inner.clients.clone(), self.inner.ledger_topic.clone());
        blocking(move || settle(&clients, &topic, partition, timeout))
            .await
            .and_then(|settled| settled)
            .map_err(TxnFailure::Unsettled)?;
        Ok(Committed::Kept)
    }

    /// Learns whether a transaction whose commit was refused after every record was
    /// acknowledged committed anyway (see [`crate::context::Acks`]): by reading back its ledger
    /// record if it wrote one, else its first record, once the transaction is decided. Reading
    /// the ledger partition through its end also settles the mark, as [`KafkaFence::transact`]
    /// does after a commit.
    async fn read_back(
        &self,
        failure: TxnFailure,
        acked: &[Acked],
    ) -> Result<Committed, TxnFailure> {
        let probe = acked
            .iter()
            .find(|a| a.topic == self.inner.ledger_topic)
            .or_else(|| acked.first())
            .cloned();
        let Some(probe) = probe else {
            return Err(failure);
        };
        let (clients, timeout, read) = (
            self.inner.clients.clone(),
            self.inner.timeout,
            probe.clone(),
        );
        match blocking(move || committed_at(&clients, &read, timeout))
            .await
            .and_then(|read| read)
        {
            Ok(true) => {
                tracing::warn!(
                    ?probe,
                    ?failure,
                    "commit refused, yet the transaction committed (its first answer was lost)"
                );
                Ok(Committed::DespiteRefusal)
            }
            Ok(false) => Err(failure),
            Err(unknown) => Err(TxnFailure::Unsettled(unknown)),
        }
    }

    pub(crate) fn txn_error(
        &self,
        domain: &Domain,
        operation: Operation,
        failure: TxnFailure,
    ) -> FenceError {
        match failure {
            TxnFailure::Ambiguous(error) => FenceError::Ambiguous {
                domain: domain.clone(),
                operation,
                source: Box::new(KafkaFenceError::Kafka(error)),
            },
            TxnFailure::Unsettled(error) => FenceError::Ambiguous {
                domain: domain.clone(),
                operation,
                source: Box::new(error),
            },
            TxnFailure::Fenced(error) | TxnFailure::Aborted(error) | TxnFailure::Failed(error) => {
                backend(Some(domain), error)
            }
        }
    }

    /// A data record of an append: the user's record plus the fence headers (with its place
    /// in the domain's sequence under record-key partitioning).
    pub(crate) fn data_record(
        &self,
        domain: &Domain,
        partition: Option<i32>,
        token: FencingToken,
        op_id: Option<&OperationId>,
        seq: Option<u64>,
        record: &Record,
    ) -> Outgoing {
        let mut headers = record.headers.clone();
        headers.extend(fence_headers(domain, token, op_id, seq));
        Outgoing {
            topic: self.inner.data_topic.clone(),
            partition,
            key: record.key.clone(),
            value: record.value.clone(),
            headers,
        }
    }
}

impl Outgoing {
    /// A record outside any domain's transaction (the ledger's layout record).
    pub(crate) fn plain(topic: String, partition: i32, key: &[u8], value: String) -> Self {
        Outgoing {
            topic,
            partition: Some(partition),
            key: Some(Bytes::copy_from_slice(key)),
            value: Bytes::from(value),
            headers: Vec::new(),
        }
    }
}

impl KafkaFence {
    /// Sends `record` with a plain producer (no transaction: it is visible at once; a resent
    /// duplicate of the layout record is harmless) and waits for the broker's acknowledgement.
    pub(crate) async fn produce_plain(&self, record: Outgoing) -> Result<(), FenceError> {
        let producer: FutureProducer<KafkaContext> = self
            .inner
            .clients
            .config
            .clone()
            .set("enable.idempotence", "false")
            .set("acks", "all")
            .create_with_context(self.inner.clients.context.for_client())
            .map_err(|e| backend(None, e))?;
        let mut future = FutureRecord::<[u8], [u8]>::to(&record.topic).payload(&record.value[..]);
        if let Some(partition) = record.partition {
            future = future.partition(partition);
        }
        if let Some(key) = &record.key {
            future = future.key(&key[..]);
        }
        producer
            .send(future, self.inner.timeout)
            .await
            .map(|_| ())
            .map_err(|(error, _)| backend(None, error))
    }
}

/// A transaction that committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Committed {
    /// Its producer runs the next transaction.
    Kept,
    /// Its commit was refused, yet it committed (read back): the producer is fenced, and the
    /// holder opens another for its next transaction.
    DespiteRefusal,
}

/// How [`run_transaction`] ended.
enum Ended {
    Committed,
    /// Nothing was committed, or (`Ambiguous`) nothing is known.
    Failed(TxnFailure),
    /// The commit was refused after the broker acknowledged every record: it may have
    /// committed anyway, which the acknowledged offsets can tell.
    RefusedAfterAcks {
        failure: TxnFailure,
        acked: Vec<Acked>,
    },
}

/// One transaction: begin, send every record, commit. Blocking.
fn run_transaction(producer: &TxnProducer, records: Vec<Outgoing>, timeout: Duration) -> Ended {
    match send_and_commit(producer, &records, timeout) {
        Ok(()) => Ended::Committed,
        Err((failure, false)) => Ended::Failed(failure),
        Err((failure, true)) => {
            let acks = producer.context().acks();
            let refused = match &failure {
                TxnFailure::Fenced(error)
                | TxnFailure::Aborted(error)
                | TxnFailure::Failed(error) => {
                    // An authorisation or missing-topic refusal never follows a commit.
                    !permanent(error)
                }
                TxnFailure::Ambiguous(_) | TxnFailure::Unsettled(_) => false,
            };
            if !refused || !acks.delivered_all(records.len()) {
                // A record the broker refused: no commit was ever sent.
                Ended::Failed(failure)
            } else if acks.acked.is_empty() {
                // Delivered, but nowhere a read can look: it may have committed.
                Ended::Failed(failure.into_ambiguous())
            } else {
                Ended::RefusedAfterAcks {
                    failure,
                    acked: acks.acked,
                }
            }
        }
    }
}

/// Begins, sends and commits; a failure says whether it came from the commit.
fn send_and_commit(
    producer: &TxnProducer,
    records: &[Outgoing],
    timeout: Duration,
) -> Result<(), (TxnFailure, bool)> {
    let before_commit = |failure| (failure, false);
    producer.context().start_acks();
    producer
        .begin_transaction()
        .map_err(|e| before_commit(classify(e, false)))?;
    for outgoing in records {
        let mut headers = OwnedHeaders::new_with_capacity(outgoing.headers.len());
        for (name, value) in &outgoing.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(&value[..]),
            });
        }
        let mut record = BaseRecord::<[u8], [u8]>::to(&outgoing.topic)
            .payload(&outgoing.value[..])
            .headers(headers);
        if let Some(partition) = outgoing.partition {
            record = record.partition(partition);
        }
        if let Some(key) = &outgoing.key {
            record = record.key(&key[..]);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((error, _)) => {
                    let _ = producer.abort_transaction(timeout);
                    return Err(before_commit(match classify(error, false) {
                        TxnFailure::Failed(error) => TxnFailure::Aborted(error),
                        other => other,
                    }));
                }
            }
        }
    }
    match crate::commit_when_delivered(producer, timeout) {
        Ok(()) => Ok(()),
        Err(error) => match classify(error, true) {
            TxnFailure::Aborted(error) => {
                let _ = producer.abort_transaction(timeout);
                Err((TxnFailure::Aborted(error), true))
            }
            other => Err((other, true)),
        },
    }
}

/// Sleeps the backoff before retry `attempt` of an aborted transaction.
pub(crate) async fn pause(backoff: Backoff, attempt: usize) {
    let attempt = u32::try_from(attempt).unwrap_or(u32::MAX);
    tokio::time::sleep(backoff.delay(attempt)).await;
}
