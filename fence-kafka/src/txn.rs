//! The transaction runner: records ready to send, one blocking transaction on the blocking
//! pool, and how its failures become fence errors.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{Backoff, Domain, FenceError, FencingToken, Operation, OperationId, Record};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};

use crate::client::{blocking, TxnProducer};
use crate::error::{backend, classify, KafkaFenceError, TxnFailure};
use crate::fence::KafkaFence;
use crate::ledger::LedgerState;
use crate::record::fence_headers;

/// A record ready to send inside a transaction.
pub(crate) struct Outgoing {
    topic: String,
    partition: i32,
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
            partition,
            key: Some(Bytes::copy_from_slice(domain.as_str().as_bytes())),
            value: Bytes::from(state.encode()),
            headers: Vec::new(),
        }
    }

    /// Sends `records` in one transaction on `producer`.
    pub(crate) async fn transact(
        &self,
        producer: &Arc<TxnProducer>,
        records: Vec<Outgoing>,
    ) -> Result<(), TxnFailure> {
        let (producer, timeout) = (producer.clone(), self.inner.timeout);
        match blocking(move || run_transaction(&producer, records, timeout)).await {
            Ok(result) => result,
            // The worker may have died after the commit was sent: the outcome is unknown.
            Err(worker) => Err(TxnFailure::Ambiguous(KafkaError::Canceled))
                .inspect_err(|_| tracing::error!(%worker, "transaction worker failed")),
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
            TxnFailure::Fenced(error) | TxnFailure::Aborted(error) | TxnFailure::Failed(error) => {
                backend(Some(domain), error)
            }
        }
    }

    /// A data record of an append: the user's record plus the fence headers.
    pub(crate) fn data_record(
        &self,
        domain: &Domain,
        partition: i32,
        token: FencingToken,
        op_id: Option<&OperationId>,
        record: &Record,
    ) -> Outgoing {
        let mut headers = record.headers.clone();
        headers.extend(fence_headers(domain, token, op_id));
        Outgoing {
            topic: self.inner.data_topic.clone(),
            partition,
            key: record.key.clone(),
            value: record.value.clone(),
            headers,
        }
    }
}

/// One transaction: begin, send every record, commit. Blocking.
fn run_transaction(
    producer: &TxnProducer,
    records: Vec<Outgoing>,
    timeout: Duration,
) -> Result<(), TxnFailure> {
    producer
        .begin_transaction()
        .map_err(|e| classify(e, false))?;
    for outgoing in &records {
        let mut headers = OwnedHeaders::new_with_capacity(outgoing.headers.len());
        for (name, value) in &outgoing.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(&value[..]),
            });
        }
        let mut record = BaseRecord::<[u8], [u8]>::to(&outgoing.topic)
            .partition(outgoing.partition)
            .payload(&outgoing.value[..])
            .headers(headers);
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
                    return Err(match classify(error, false) {
                        TxnFailure::Failed(error) => TxnFailure::Aborted(error),
                        other => other,
                    });
                }
            }
        }
    }
    match producer.commit_transaction(timeout) {
        Ok(()) => Ok(()),
        Err(error) => match classify(error, true) {
            TxnFailure::Aborted(error) => {
                let _ = producer.abort_transaction(timeout);
                Err(TxnFailure::Aborted(error))
            }
            other => Err(other),
        },
    }
}

/// Sleeps the backoff before retry `attempt` of an aborted transaction.
pub(crate) async fn pause(backoff: Backoff, attempt: usize) {
    let attempt = u32::try_from(attempt).unwrap_or(u32::MAX);
    tokio::time::sleep(backoff.delay(attempt)).await;
}
