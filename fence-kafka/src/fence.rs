//! `KafkaFence`: fenced, transactional appends on Kafka.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::raw::TokenBounds;
use fence_core::{
    AppendOutcome, AppendRequest, Backoff, Capabilities, Claimed, Domain, Fence, FenceError,
    FencedLog, FencingToken, InvalidInput, LogEntry, OpIdRetention, Record,
};
use tokio::sync::OnceCell;

use crate::client::{blocking, partition_count, read_partition, transactional_producer, Clients};
use crate::error::{backend, BACKEND};
use crate::holders::{Holder, Holders};
use crate::ledger::{partition_for, LedgerRecord, LedgerState};
use crate::partitioning::Partitioning;
use crate::record::{CommittedRecord, SEQ_HEADER, TOKEN_HEADER};

pub(crate) struct Inner {
    pub(crate) clients: Clients,
    pub(crate) data_topic: String,
    pub(crate) ledger_topic: String,
    pub(crate) transactional_id_prefix: String,
    pub(crate) ledger_partitions_on_create: i32,
    pub(crate) ledger_replication: i32,
    pub(crate) partitioning: Partitioning,
    /// The topics' partition counts, checked against the ledger's layout record on first use.
    pub(crate) partitions: OnceCell<Partitions>,
    /// Set once the ledger's layout record holds this fence's counts.
    pub(crate) layout_recorded: OnceCell<()>,
    pub(crate) timeout: Duration,
    pub(crate) transaction_timeout: Duration,
    pub(crate) max_batch_bytes: usize,
    pub(crate) bounds: TokenBounds,
    pub(crate) op_id_retention: usize,
    pub(crate) aborted_retries: usize,
    pub(crate) backoff: Backoff,
    pub(crate) holders: Holders,
}

/// The partition counts of the data and ledger topics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Partitions {
    /// The ledger topic's.
    pub(crate) ledger: i32,
    /// The data topic's.
    pub(crate) data: i32,
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
///
/// ```no_run
/// use std::time::Duration;
/// use fence_core::{AppendRequest, Domain, Fence, FencedLog, FencingToken, Record};
/// use fence_kafka::rdkafka::config::ClientConfig;
/// use fence_kafka::KafkaFence;
/// # async fn run() -> Result<(), fence_core::FenceError> {
/// let mut config = ClientConfig::new();
/// config.set("bootstrap.servers", "127.0.0.1:9092"); // and SASL/TLS settings as needed
/// let fence = KafkaFence::builder(config)
///     .data_topic("orders")
///     .ledger_topic("orders-fence-ledger") // created by the fence, compacted
///     .timeout(Duration::from_secs(10))
///     .connect()
///     .await?;
/// let partition = Domain::new("orders/partition-7")?;
/// let token = FencingToken::new(42)?; // from the lease service of your choice
/// fence.claim(&partition, token).await?; // before the first append of each holder
/// let events = vec![Record::new("order-1 shipped").with_key("order-1")];
/// fence.append(&AppendRequest::new(partition.clone(), token, events)).await?; // one transaction
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KafkaFence {
    pub(crate) inner: Arc<Inner>,
}

impl KafkaFence {
    /// The transactional id of a domain: the prefix, `:`, and the domain's escaped form. An
    /// escaped domain never holds `:`, so the last `:` splits every id one way only: no two
    /// (prefix, domain) pairs share an id (prefix `t1` with domain `2x` is `t1:2x`, prefix `t12`
    /// with domain `x` is `t12:x`).
    pub fn transactional_id(&self, domain: &Domain) -> String {
        format!(
            "{}:{}",
            self.inner.transactional_id_prefix,
            domain.escaped()
        )
    }

    /// The data topic.
    pub fn data_topic(&self) -> &str {
        &self.inner.data_topic
    }

    /// How domains are placed on the data topic's partitions.
    pub fn partitioning(&self) -> &Partitioning {
        &self.inner.partitioning
    }

    /// The partition of the data topic that holds `domain`'s records; invalid input under
    /// [`Partitioning::RecordKey`] (each record's key decides) and for an explicit choice the
    /// topic does not have.
    pub async fn data_partition(&self, domain: &Domain) -> Result<i32, FenceError> {
        let mut partitions = self.data_partitions().await?;
        let partitioning = &self.inner.partitioning;
        if let (Partitioning::Explicit(_), None) =
            (partitioning, partitioning.partition_of(domain, partitions))
        {
            // A partition added since the count was read is allowed here: look again.
            partitions = self.current_data_partitions().await?;
        }
        partitioning
            .partition_of(domain, partitions)
            .ok_or_else(|| {
                InvalidInput::Configuration(format!(
                    "{} partitioning places domain `{domain}` on none of the {partitions} partitions of topic `{}`",
                    self.inner.partitioning.name(),
                    self.inner.data_topic
                ))
                .into()
            })
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
    ) -> Result<Vec<CommittedRecord>, FenceError> {
        let (config, topic, timeout) = (
            self.inner.clients.clone(),
            self.inner.data_topic.clone(),
            self.inner.timeout,
        );
        blocking(move || read_partition(&config, &topic, partition, from, timeout))
            .await
            .map_err(|e| backend(None, e))?
            .map_err(|e| backend(None, e))
    }

    /// Drops the holder of (domain, token): its transactional producer is closed. Call it when
    /// a lease ends; the next append of that token claims again. Holders are also bounded
    /// (`max_holders`): idle ones are dropped first when the bound is reached.
    pub fn release(&self, domain: &Domain, token: FencingToken) {
        self.inner.holders.forget(domain, token);
    }

    /// How many holders (initialised producers) this fence keeps now.
    pub fn holders(&self) -> usize {
        self.inner.holders.len()
    }

    pub(crate) async fn ledger_partitions(&self) -> Result<i32, FenceError> {
        Ok(self.partitions().await?.ledger)
    }

    pub(crate) async fn data_partitions(&self) -> Result<i32, FenceError> {
        Ok(self.partitions().await?.data)
    }

    /// The data topic's partition count now (not the one read at first use): placements that
    /// allow partitions to be added look again.
    async fn current_data_partitions(&self) -> Result<i32, FenceError> {
        let (clients, topic, timeout) = (
            self.inner.clients.clone(),
            self.inner.data_topic.clone(),
            self.inner.timeout,
        );
        blocking(move || partition_count(&clients, &topic, timeout))
            .await
            .and_then(|r| r)
            .map_err(|e| backend(None, e))
    }

    /// Both topics' partition counts, read once and checked against the layout the ledger
    /// recorded (see [`crate::layout`]): a count that changed since is refused, loudly, for as
    /// long as it differs.
    pub(crate) async fn partitions(&self) -> Result<Partitions, FenceError> {
        self.inner
            .partitions
            .get_or_try_init(|| async {
                let count = |topic: String| {
                    let (clients, timeout) = (self.inner.clients.clone(), self.inner.timeout);
                    async move {
                        blocking(move || partition_count(&clients, &topic, timeout))
                            .await
                            .and_then(|r| r)
                            .map_err(|e| backend(None, e))
                    }
                };
                let partitions = Partitions {
                    ledger: count(self.inner.ledger_topic.clone()).await?,
                    data: count(self.inner.data_topic.clone()).await?,
                };
                // Read-only here: the layout is recorded by the first change (record_layout).
                self.wanted_layout(self.stored_layout().await?.as_ref(), partitions)?;
                Ok(partitions)
            })
            .await
            .copied()
    }

    /// The domain's committed fence-ledger record (FORMATS.md §4.3): its mark and remembered
    /// operation ids, as a read_committed consumer of the ledger topic sees them now. For
    /// operators (`fence inspect kafka`); it opens no producer, so it fences no one.
    pub async fn committed_ledger(&self, domain: &Domain) -> Result<LedgerRecord, FenceError> {
        let state = self.read_ledger(domain).await?;
        Ok(LedgerRecord {
            high_water_mark: state.hwm,
            next_seq: (state.seq > 0).then_some(state.seq),
            ops: state.ops,
        })
    }

    /// Reads the domain's committed ledger state.
    pub(crate) async fn read_ledger(&self, domain: &Domain) -> Result<LedgerState, FenceError> {
        let partition = partition_for(domain.as_str(), self.ledger_partitions().await?);
        let (config, topic, timeout) = (
            self.inner.clients.clone(),
            self.inner.ledger_topic.clone(),
            self.inner.timeout,
        );
        let messages = blocking(move || read_partition(&config, &topic, partition, 0, timeout))
            .await
            .map_err(|e| backend(Some(domain), e))?
            .map_err(|e| backend(Some(domain), e))?;
        let key = domain.as_str().as_bytes();
        let state = match messages
            .iter()
            .rev()
            .find(|m| m.key.as_deref() == Some(key))
        {
            None => LedgerState::default(),
            Some(message) => LedgerState::decode(&message.value).map_err(|why| {
                FenceError::corrupt(BACKEND, domain, format!("fence ledger: {why}"))
            })?,
        };
        self.inner.holders.note_mark(domain, state.hwm);
        Ok(state)
    }

    /// A new producer for the domain's transactional id (fencing every older one), with the
    /// ledger state read after its initialisation.
    pub(crate) async fn open(&self, domain: &Domain) -> Result<Holder, FenceError> {
        let (config, id, timeout) = (
            self.inner.clients.clone(),
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

    /// Whether to decide on the committed ledger before opening a producer: opening one bumps
    /// the domain's producer epoch, which aborts the owner's open transaction, so a token
    /// refused only after opening would still disturb the owner. Done with a step bound (a
    /// runaway token must not disturb anyone); without one, a zombie's first attempt costs
    /// the owner one aborted transaction and saves every claim a ledger read.
    pub(crate) fn decides_before_opening(&self) -> bool {
        self.inner.bounds.max_step.is_some()
    }

    async fn read_log_now(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        // A domain's records sit in one partition, or (record-key partitioning) in any.
        let partitions = match self.inner.partitioning {
            // Partitions may have been added since the count was first read.
            Partitioning::RecordKey => (0..self.current_data_partitions().await?).collect(),
            _ => vec![self.data_partition(domain).await?],
        };
        let mut entries = Vec::new();
        for partition in partitions {
            for message in self.read_committed(partition, 0).await? {
                let Some(fence) = message.fence_headers() else {
                    continue; // not a fenced record
                };
                if fence.domain != domain.as_str() {
                    continue; // another domain's record
                }
                let damaged = |what: &str| {
                    FenceError::corrupt(
                        BACKEND,
                        domain,
                        format!(
                            "record at partition {} offset {} has no valid {what} header",
                            message.partition, message.offset
                        ),
                    )
                };
                let token = fence.token.ok_or_else(|| damaged(TOKEN_HEADER))?;
                let seq = match self.inner.partitioning {
                    // One data topic, one partitioning: a record without its place is not ours.
                    Partitioning::RecordKey => fence.seq.ok_or_else(|| damaged(SEQ_HEADER))?,
                    _ => 0,
                };
                let record = Record {
                    key: message.key.clone(),
                    value: message.value.clone(),
                    headers: message.user_headers(),
                };
                entries.push((seq, LogEntry::new(token, fence.op_id, record)));
            }
        }
        // Within a partition commit order is the domain's order; across partitions the
        // sequence is (a stable sort keeps the first case as read).
        entries.sort_by_key(|(seq, _)| *seq);
        Ok(entries.into_iter().map(|(_, entry)| entry).collect())
    }
}

impl fmt::Debug for KafkaFence {
    // The client config may hold SASL passwords: only the bootstrap servers are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaFence")
            .field(
                "bootstrap.servers",
                &self.inner.clients.config.get("bootstrap.servers"),
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
            .with_max_token_step(self.inner.bounds.max_step)
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.claim_now(domain, token).await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.read_ledger(domain).await?.hwm)
    }
}

#[async_trait]
impl FencedLog for KafkaFence {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        self.append_now(request).await
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        self.read_log_now(domain).await
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::config::ClientConfig;

    use super::*;

    fn fence_with_prefix(prefix: &str) -> KafkaFence {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1");
        KafkaFence::builder(config)
            .data_topic("events")
            .transactional_id_prefix(prefix)
            .build()
            .unwrap_or_else(|e| unreachable!("{e}"))
            .into_inner()
    }

    #[test]
    fn transactional_ids_are_injective_across_prefixes_and_domains() {
        let d = |name: &str| Domain::new(name).unwrap_or_else(|e| unreachable!("{e}"));
        let pairs = [
            ("t1", "2x"),
            ("t12", "x"),
            ("t1:", "x"),
            ("t1", ":x"),
            ("", "t1:x"),
        ];
        let ids: std::collections::HashSet<String> = pairs
            .iter()
            .map(|(prefix, domain)| fence_with_prefix(prefix).transactional_id(&d(domain)))
            .collect();
        assert_eq!(ids.len(), pairs.len(), "{ids:?}");
        assert_eq!(
            fence_with_prefix("fence").transactional_id(&d("orders")),
            "fence:orders"
        );
    }
}
