//! `KafkaFence`: fenced, transactional appends on Kafka.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::pipeline::{self, ClaimDecision, Decision};
use fence_core::telemetry::observe;
use fence_core::{
    rule, AppendOutcome, AppendRequest, Backoff, Capabilities, Claimed, Domain, EqualTokenPolicy,
    Fence, FenceError, FencedLog, FencingToken, LogEntry, OpIdRetention, Operation, Record,
};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use tokio::sync::OnceCell;

use crate::client::{
    blocking, partition_count, payload, read_partition, transactional_producer, TxnProducer,
};
use crate::config::KafkaFenceBuilder;
use crate::error::{
    backend, classify, fenced_by_another_producer, permanent, KafkaFenceError, TxnFailure, BACKEND,
};
use crate::ledger::{partition_for, LedgerState};

/// Header carrying the domain on every fenced record.
pub const DOMAIN_HEADER: &str = "fence-domain";
/// Header carrying the fencing token on every fenced record.
pub const TOKEN_HEADER: &str = "fence-token";
/// Header carrying the operation id, when the append has one.
pub const OP_HEADER: &str = "fence-op";

pub(crate) struct Inner {
    pub(crate) config: ClientConfig,
    pub(crate) data_topic: String,
    pub(crate) ledger_topic: String,
    pub(crate) transactional_id_prefix: String,
    pub(crate) ledger_partitions_on_create: i32,
    pub(crate) ledger_replication: i32,
    pub(crate) ledger_partitions: OnceCell<i32>,
    pub(crate) data_partitions: OnceCell<i32>,
    pub(crate) timeout: Duration,
    pub(crate) transaction_timeout: Duration,
    pub(crate) max_batch_bytes: usize,
    pub(crate) op_id_retention: usize,
    pub(crate) aborted_retries: usize,
    pub(crate) backoff: Backoff,
    pub(crate) holders: Mutex<HashMap<(Domain, FencingToken), Slot>>,
    /// The greatest mark seen per domain. Marks never decrease, so a token below it is stale
    /// for certain and is refused without initialising a producer, which would abort the
    /// owner's open transaction.
    pub(crate) known_marks: Mutex<HashMap<Domain, FencingToken>>,
}

/// One holder (domain, token): its initialised producer and the ledger state it wrote last.
pub(crate) struct Holder {
    producer: Arc<TxnProducer>,
    state: LedgerState,
}

pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Holder>>>;

/// A record ready to send inside a transaction.
struct Outgoing {
    topic: String,
    partition: i32,
    key: Option<Bytes>,
    value: Bytes,
    headers: Vec<(String, Bytes)>,
}

/// Fenced appends on Kafka, safe against zombie producers.
///
/// Kafka fences by producer epoch per `transactional.id`, and the LATEST `init_transactions`
/// wins, not the highest lease token. So each domain has one transactional id, and each holder
/// (domain, token) claims through the fence ledger after `init_transactions`: it reads the
/// domain's committed high-water mark and refuses with [`FenceError::Fenced`] if its token is
/// older, else commits its token to the ledger. A producer fenced by someone else's
/// `init_transactions` is never reused: the holder claims again with a new producer, which
/// keeps a zombie's re-initialisation from evicting the rightful owner.
#[derive(Clone)]
pub struct KafkaFence {
    pub(crate) inner: Arc<Inner>,
}

impl KafkaFence {
    /// A builder from your client configuration.
    pub fn builder(config: ClientConfig) -> KafkaFenceBuilder {
        KafkaFenceBuilder::new(config)
    }

    /// The transactional id of a domain: the prefix plus the domain's injective escaped form.
    pub fn transactional_id(&self, domain: &Domain) -> String {
        format!("{}{}", self.inner.transactional_id_prefix, domain.escaped())
    }

    /// The data topic.
    pub fn data_topic(&self) -> &str {
        &self.inner.data_topic
    }

    /// The partition of the data topic that holds `domain`'s records.
    pub async fn data_partition(&self, domain: &Domain) -> Result<i32, FenceError> {
        Ok(partition_for(
            domain.as_str(),
            self.data_partitions().await?,
        ))
    }

    /// The number of partitions of the data topic.
    pub async fn data_partition_count(&self) -> Result<i32, FenceError> {
        self.data_partitions().await
    }

    /// The committed records of data partition `partition` from offset `from`, as a
    /// read_committed consumer sees them, up to the partition's end at the call: for crates
    /// that follow the data topic (fence-outbox's relay).
    pub async fn read_committed(
        &self,
        partition: i32,
        from: i64,
    ) -> Result<Vec<rdkafka::message::OwnedMessage>, FenceError> {
        let (config, topic, timeout) = (
            self.inner.config.clone(),
            self.inner.data_topic.clone(),
            self.inner.timeout,
        );
        blocking(move || read_partition(&config, &topic, partition, from, timeout))
            .await
            .map_err(|e| backend(None, e))?
            .map_err(|e| backend(None, e))
    }

    pub(crate) async fn ledger_partitions(&self) -> Result<i32, FenceError> {
        self.partitions(&self.inner.ledger_partitions, &self.inner.ledger_topic)
            .await
    }

    pub(crate) async fn data_partitions(&self) -> Result<i32, FenceError> {
        self.partitions(&self.inner.data_partitions, &self.inner.data_topic)
            .await
    }

    async fn partitions(&self, cell: &OnceCell<i32>, topic: &str) -> Result<i32, FenceError> {
        cell.get_or_try_init(|| async {
            let (config, topic, timeout) = (
                self.inner.config.clone(),
                topic.to_owned(),
                self.inner.timeout,
            );
            blocking(move || partition_count(&config, &topic, timeout))
                .await
                .and_then(|r| r)
                .map_err(|e| backend(None, e))
        })
        .await
        .copied()
    }

    fn slot(&self, domain: &Domain, token: FencingToken) -> Slot {
        let mut holders = self.inner.holders.lock().unwrap_or_else(|p| p.into_inner());
        holders.entry((domain.clone(), token)).or_default().clone()
    }

    fn note_mark(&self, domain: &Domain, mark: Option<FencingToken>) {
        let Some(mark) = mark else { return };
        let mut marks = self
            .inner
            .known_marks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let known = marks.entry(domain.clone()).or_insert(mark);
        *known = (*known).max(mark);
    }

    /// Refuses a token already known to be stale, with no I/O.
    fn check_known(
        &self,
        domain: &Domain,
        token: FencingToken,
        policy: EqualTokenPolicy,
    ) -> Result<(), FenceError> {
        let known = self
            .inner
            .known_marks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(domain)
            .copied();
        match known {
            // Under the same-owner policy an equal mark may be this holder's own claim.
            Some(mark) if token < mark => rule::check_token(domain, Some(mark), token, policy),
            _ => Ok(()),
        }
    }

    fn forget(&self, domain: &Domain, token: FencingToken) {
        let mut holders = self.inner.holders.lock().unwrap_or_else(|p| p.into_inner());
        holders.remove(&(domain.clone(), token));
    }

    /// Reads the domain's committed ledger state.
    async fn read_ledger(&self, domain: &Domain) -> Result<LedgerState, FenceError> {
        let partition = partition_for(domain.as_str(), self.ledger_partitions().await?);
        let (config, topic, timeout) = (
            self.inner.config.clone(),
            self.inner.ledger_topic.clone(),
            self.inner.timeout,
        );
        let messages = blocking(move || read_partition(&config, &topic, partition, 0, timeout))
            .await
            .map_err(|e| backend(Some(domain), e))?
            .map_err(|e| backend(Some(domain), e))?;
        let key = domain.as_str().as_bytes();
        let state = match messages.iter().rev().find(|m| m.key() == Some(key)) {
            None => LedgerState::default(),
            Some(message) => LedgerState::decode(payload(message)).map_err(|why| {
                FenceError::corrupt(BACKEND, domain, format!("fence ledger: {why}"))
            })?,
        };
        self.note_mark(domain, state.hwm);
        Ok(state)
    }

    /// A new producer for the domain's transactional id (fencing every older one), with the
    /// ledger state read after its initialisation.
    async fn open(&self, domain: &Domain) -> Result<Holder, FenceError> {
        let (config, id, timeout) = (
            self.inner.config.clone(),
            self.transactional_id(domain),
            self.inner.transaction_timeout,
        );
        let producer = blocking(move || transactional_producer(&config, &id, timeout))
            .await
            .map_err(|e| backend(Some(domain), e))?
            .map_err(|e| backend(Some(domain), e))?;
        let state = self.read_ledger(domain).await?;
        Ok(Holder {
            producer: Arc::new(producer),
            state,
        })
    }

    fn ledger_record(&self, domain: &Domain, partition: i32, state: &LedgerState) -> Outgoing {
        Outgoing {
            topic: self.inner.ledger_topic.clone(),
            partition,
            key: Some(Bytes::copy_from_slice(domain.as_str().as_bytes())),
            value: Bytes::from(state.encode()),
            headers: Vec::new(),
        }
    }

    /// Sends `records` in one transaction on `producer`.
    async fn transact(
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

    fn txn_error(&self, domain: &Domain, operation: Operation, failure: TxnFailure) -> FenceError {
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

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.check_known(domain, token, EqualTokenPolicy::SameOwner)?;
        let slot = self.slot(domain, token);
        let mut guard = slot.lock().await;
        let ledger_partition = partition_for(domain.as_str(), self.ledger_partitions().await?);
        let attempts = self.inner.aborted_retries + 1;
        let mut last = None;
        for attempt in 0..attempts {
            *guard = None;
            if attempt > 0 {
                // Lost to a concurrent claimer: if a higher mark is committed now, stop without
                // initialising a producer, which would only fence that claimer in turn.
                let committed = self.read_ledger(domain).await?;
                if let Err(fenced) = pipeline::decide_claim(domain, committed.hwm, token) {
                    drop(guard);
                    self.forget(domain, token);
                    return Err(fenced);
                }
            }
            let mut holder = self.open(domain).await?;
            let decision = match pipeline::decide_claim(domain, holder.state.hwm, token) {
                Ok(decision) => decision,
                Err(fenced) => {
                    drop(guard);
                    self.forget(domain, token);
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
                    Ok(()) => {
                        holder.state = next;
                        self.note_mark(domain, Some(token));
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
        self.forget(domain, token);
        Err(match last {
            Some(error) if !fenced_by_another_producer(&error) => backend(Some(domain), error),
            _ => backend(Some(domain), KafkaFenceError::ClaimContended { attempts }),
        })
    }

    async fn append_now(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let domain = request.domain();
        let token = request.token();
        pipeline::validate_append(request, Some(self.inner.max_batch_bytes))?;
        let strict = request.policy() == EqualTokenPolicy::Strict;
        let data_partition = partition_for(domain.as_str(), self.data_partitions().await?);
        let ledger_partition = partition_for(domain.as_str(), self.ledger_partitions().await?);
        let slot = self.slot(domain, token);
        let mut guard = slot.lock().await;
        let mut last = None;
        for attempt in 0..=self.inner.aborted_retries {
            // Strict appends need a fresh look at the ledger every time.
            let fresh = strict || guard.is_none();
            if fresh {
                *guard = None;
                if self.check_known(domain, token, request.policy()).is_err() {
                    // Known stale: opening a producer would fence the owner. Decide on the
                    // committed ledger, read without one: a late retry still learns its first
                    // outcome, anything else is fenced.
                    let committed = self.read_ledger(domain).await?;
                    match pipeline::decide_append(request, committed.hwm, &committed.ops) {
                        Ok(Decision::Replay(first)) => return Ok(AppendOutcome::Duplicate(first)),
                        Ok(Decision::Apply { .. }) => {}
                        Err(refused) => {
                            drop(guard);
                            self.forget(domain, token);
                            return Err(refused);
                        }
                    }
                }
                *guard = Some(self.open(domain).await?);
            }
            let Some(holder) = guard.as_mut() else {
                continue;
            };
            let (appended, remember) =
                match pipeline::decide_append(request, holder.state.hwm, &holder.state.ops) {
                    Ok(Decision::Replay(first)) => return Ok(AppendOutcome::Duplicate(first)),
                    Ok(Decision::Apply { outcome, remember }) => (outcome, remember),
                    Err(refused) => {
                        *guard = None;
                        drop(guard);
                        self.forget(domain, token);
                        return Err(refused);
                    }
                };
            let mut next = holder.state.clone();
            next.hwm = Some(token);
            if let Some(record) = remember {
                next.ops.remember(record, self.inner.op_id_retention);
            }
            let mut records: Vec<Outgoing> = request
                .records()
                .iter()
                .map(|record| {
                    self.data_record(
                        domain,
                        data_partition,
                        token,
                        request.op_id().map(|o| o.as_str()),
                        record,
                    )
                })
                .collect();
            // The ledger moves with the data when the mark or the remembered op ids change.
            if next != holder.state {
                records.push(self.ledger_record(domain, ledger_partition, &next));
            }
            match self.transact(&holder.producer, records).await {
                Ok(()) => {
                    holder.state = next;
                    self.note_mark(domain, Some(token));
                    return Ok(AppendOutcome::Appended(appended));
                }
                Err(TxnFailure::Fenced(error) | TxnFailure::Aborted(error))
                    if !permanent(&error) =>
                {
                    // Nothing was written. Claim again with a new producer: a stale holder is
                    // refused there; the owner retries.
                    tracing::info!(domain = domain.as_str(), token = token.get(), attempt, %error, "transaction fenced or aborted; re-claiming");
                    *guard = None;
                    last = Some(error);
                    pause(self.inner.backoff, attempt).await;
                }
                Err(failure) => {
                    *guard = None;
                    return Err(self.txn_error(domain, Operation::Append, failure));
                }
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

    fn data_record(
        &self,
        domain: &Domain,
        partition: i32,
        token: FencingToken,
        op: Option<&str>,
        record: &Record,
    ) -> Outgoing {
        let mut headers = record.headers.clone();
        headers.push((
            DOMAIN_HEADER.to_owned(),
            Bytes::copy_from_slice(domain.as_str().as_bytes()),
        ));
        headers.push((TOKEN_HEADER.to_owned(), Bytes::from(token.to_string())));
        if let Some(op) = op {
            headers.push((OP_HEADER.to_owned(), Bytes::copy_from_slice(op.as_bytes())));
        }
        Outgoing {
            topic: self.inner.data_topic.clone(),
            partition,
            key: record.key.clone(),
            value: record.value.clone(),
            headers,
        }
    }

    async fn read_log_now(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        let partition = self.data_partition(domain).await?;
        let (config, topic, timeout) = (
            self.inner.config.clone(),
            self.inner.data_topic.clone(),
            self.inner.timeout,
        );
        let messages = blocking(move || read_partition(&config, &topic, partition, 0, timeout))
            .await
            .map_err(|e| backend(Some(domain), e))?
            .map_err(|e| backend(Some(domain), e))?;
        let mut entries = Vec::new();
        for message in &messages {
            let Some(headers) = message.headers() else {
                continue;
            };
            let mut fence = (None, None, None);
            let mut user = Vec::new();
            for header in headers.iter() {
                let value = header.value.unwrap_or_default();
                match header.key {
                    DOMAIN_HEADER => fence.0 = Some(value),
                    TOKEN_HEADER => fence.1 = Some(value),
                    OP_HEADER => fence.2 = Some(value),
                    name => user.push((name.to_owned(), Bytes::copy_from_slice(value))),
                }
            }
            if fence.0 != Some(domain.as_str().as_bytes()) {
                continue; // another domain's record, or not a fenced one
            }
            let token = std::str::from_utf8(fence.1.unwrap_or_default())
                .ok()
                .and_then(|t| t.parse::<FencingToken>().ok())
                .ok_or_else(|| {
                    FenceError::corrupt(
                        BACKEND,
                        domain,
                        format!(
                            "record at offset {} has no valid token header",
                            message.offset()
                        ),
                    )
                })?;
            let op_id = fence
                .2
                .and_then(|op| std::str::from_utf8(op).ok())
                .and_then(|op| fence_core::OperationId::new(op).ok());
            let record = Record {
                key: message.key().map(Bytes::copy_from_slice),
                value: Bytes::copy_from_slice(payload(message)),
                headers: user,
            };
            entries.push(LogEntry::new(token, op_id, record));
        }
        Ok(entries)
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
async fn pause(backoff: Backoff, attempt: usize) {
    let attempt = u32::try_from(attempt).unwrap_or(u32::MAX);
    tokio::time::sleep(backoff.delay(attempt)).await;
}

impl fmt::Debug for KafkaFence {
    // The client config may hold SASL passwords: only the bootstrap servers are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaFence")
            .field(
                "bootstrap.servers",
                &self.inner.config.get("bootstrap.servers"),
            )
            .field("data_topic", &self.inner.data_topic)
            .field("ledger_topic", &self.inner.ledger_topic)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Fence for KafkaFence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let retention = OpIdRetention::per_domain(self.inner.op_id_retention);
        Capabilities::log()
            .with_op_id_retention(retention)
            .with_max_value_bytes(Some(self.inner.max_batch_bytes))
            .with_survives_restart(true)
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        observe(
            BACKEND,
            Operation::Claim,
            domain,
            Some(token),
            self.claim_now(domain, token),
        )
        .await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        observe(BACKEND, Operation::HighWaterMark, domain, None, async {
            Ok(self.read_ledger(domain).await?.hwm)
        })
        .await
    }
}

#[async_trait]
impl FencedLog for KafkaFence {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        observe(
            BACKEND,
            Operation::Append,
            request.domain(),
            Some(request.token()),
            self.append_now(request),
        )
        .await
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        observe(
            BACKEND,
            Operation::ReadLog,
            domain,
            None,
            self.read_log_now(domain),
        )
        .await
    }
}
