//! Configuration of a [`KafkaFence`].

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use fence_core::raw::TokenBounds;
use fence_core::{Backoff, FenceError, InvalidInput, IssuerView, Observed};
use rdkafka::config::ClientConfig;
use tokio::sync::OnceCell;

use crate::client::{ensure_topic, Clients};
use crate::context::{KafkaContext, OAuthTokenProvider};
use crate::error::backend;
use crate::partitioning::Partitioning;
use crate::{Inner, KafkaFence};

/// Default name of the fence-ledger topic.
pub const DEFAULT_LEDGER_TOPIC: &str = "fence-ledger";
/// Default prefix of the per-domain transactional ids.
pub const DEFAULT_TRANSACTIONAL_ID_PREFIX: &str = "fence";
/// Default greatest size of one append (sum of record values).
pub const DEFAULT_MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// Default number of operation ids the ledger remembers per domain.
pub const DEFAULT_OP_ID_RETENTION: usize = 64;
/// Default pause between retries of an aborted transaction: 20 ms doubling to 1 s.
const DEFAULT_BACKOFF: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));

/// Builds a [`KafkaFence`] from your `ClientConfig` (bootstrap servers, SASL/TLS settings).
///
/// ```
/// use rdkafka::config::ClientConfig;
/// let mut config = ClientConfig::new();
/// config.set("bootstrap.servers", "127.0.0.1:9092");
/// let fence = fence_kafka::KafkaFence::builder(config)
///     .data_topic("payments")
///     .ledger_topic("payments-fence-ledger")
///     .build()?;
/// assert_eq!(fence.transactional_id(&fence_core::Domain::new("partition 7")?), "fence:partition%207");
/// # Ok::<(), fence_core::FenceError>(())
/// ```
pub struct KafkaFenceBuilder {
    config: ClientConfig,
    context: KafkaContext,
    data_topic: Option<String>,
    ledger_topic: String,
    transactional_id_prefix: String,
    ledger_partitions: i32,
    ledger_replication: i32,
    timeout: Duration,
    transaction_timeout: Duration,
    max_batch_bytes: usize,
    op_id_retention: usize,
    aborted_retries: usize,
    backoff: Backoff,
    max_holders: usize,
    max_token_step: Option<NonZeroU64>,
    partitioning: Partitioning,
}

impl KafkaFence {
    /// A builder from your client configuration.
    pub fn builder(config: ClientConfig) -> KafkaFenceBuilder {
        KafkaFenceBuilder::new(config)
    }
}

impl KafkaFenceBuilder {
    pub(crate) fn new(config: ClientConfig) -> Self {
        KafkaFenceBuilder {
            config,
            context: KafkaContext::default(),
            data_topic: None,
            ledger_topic: DEFAULT_LEDGER_TOPIC.to_owned(),
            transactional_id_prefix: DEFAULT_TRANSACTIONAL_ID_PREFIX.to_owned(),
            ledger_partitions: 1,
            ledger_replication: -1,
            timeout: Duration::from_secs(30),
            transaction_timeout: Duration::from_secs(10),
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            aborted_retries: 16,
            backoff: DEFAULT_BACKOFF,
            max_holders: crate::DEFAULT_MAX_HOLDERS,
            max_token_step: None,
            partitioning: Partitioning::default(),
        }
    }

    /// Where SASL/OAUTHBEARER tokens come from (Amazon MSK with IAM, Confluent Cloud with
    /// OAuth): every producer, consumer and admin client of the fence asks `provider`. Set
    /// `security.protocol=SASL_SSL` and `sasl.mechanism=OAUTHBEARER` in the client config;
    /// needs the `ssl` feature (librdkafka builds OAUTHBEARER with OpenSSL). See the crate
    /// docs, "Managed clusters".
    pub fn oauth_token_provider(mut self, provider: impl OAuthTokenProvider) -> Self {
        self.context = KafkaContext::with_oauth(provider);
        self
    }

    /// The client context every client of the fence is opened with (see [`KafkaContext`]).
    pub fn context(mut self, context: KafkaContext) -> Self {
        self.context = context;
        self
    }

    /// The topic fenced records are appended to (each domain's records go to one partition).
    pub fn data_topic(mut self, topic: impl Into<String>) -> Self {
        self.data_topic = Some(topic.into());
        self
    }

    /// How domains' records are placed on the data topic's partitions (default
    /// [`Partitioning::DomainHash`]); see the crate docs, "Partitioning". One data topic takes
    /// one partitioning.
    pub fn partitioning(mut self, partitioning: Partitioning) -> Self {
        self.partitioning = partitioning;
        self
    }

    /// The compacted fence-ledger topic (default [`DEFAULT_LEDGER_TOPIC`]); created by
    /// [`KafkaFenceBuilder::connect`] when missing.
    pub fn ledger_topic(mut self, topic: impl Into<String>) -> Self {
        self.ledger_topic = topic.into();
        self
    }

    /// Partitions and replication factor used when creating the ledger topic (default 1
    /// partition and replication `-1`: the broker's `default.replication.factor`, so a
    /// three-node cluster configured for 3 replicas keeps the ledger on all three).
    pub fn ledger_layout(mut self, partitions: i32, replication: i32) -> Self {
        self.ledger_partitions = partitions;
        self.ledger_replication = replication;
        self
    }

    /// The prefix of the per-domain transactional ids, `<prefix>:<escaped domain>` (default
    /// [`DEFAULT_TRANSACTIONAL_ID_PREFIX`]).
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.transactional_id_prefix = prefix.into();
        self
    }

    /// Timeout of a claim, a ledger read or a commit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `transaction.timeout.ms`: how long the broker lets an open transaction of a stalled
    /// holder block read_committed readers before aborting it.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// Refuses claims and appends whose token is more than `max_step` above the domain's
    /// ledger mark, with [`fence_core::FenceError::TokenTooFar`] (see
    /// [`fence_core::raw::TokenBounds`]): a runaway token cannot burn the domain's token space in the
    /// ledger. Only the cluster's ACLs stop a producer that writes the topics directly (see the
    /// crate docs on forged tokens).
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_token_step = Some(max_step);
        self
    }

    /// Refuses appends whose values add up to more, before any I/O.
    pub fn max_batch_bytes(mut self, max: usize) -> Self {
        self.max_batch_bytes = max;
        self
    }

    /// How many holders (one initialised transactional producer per domain and token in use)
    /// the fence keeps (default [`crate::DEFAULT_MAX_HOLDERS`], at least 1): past it, idle ones
    /// are dropped and their producers closed; a dropped holder claims again on its next append.
    pub fn max_holders(mut self, count: usize) -> Self {
        self.max_holders = count;
        self
    }

    /// How many operation ids the ledger keeps per domain.
    pub fn op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// How often a transaction aborted by another producer of the domain is retried, with the
    /// [`Self::retry_backoff`] between attempts, before it is reported (default 16): an append
    /// whose producer a zombie's re-initialisation fenced (after the automatic re-claim), and a
    /// claim whose ledger transaction a concurrent claimer's re-initialisation fenced. A claim
    /// stops early, with [`fence_core::FenceError::Fenced`], once a higher mark is committed.
    pub fn aborted_retries(mut self, retries: usize) -> Self {
        self.aborted_retries = retries;
        self
    }

    /// The pause between retries of an aborted transaction: jittered exponential from `base`,
    /// doubling up to `max` (default 20 ms to 1 s), so holders that keep fencing each other
    /// spread out.
    pub fn retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = Backoff::new(base, max);
        self
    }

    /// Validates and builds with no I/O. The fence comes inside the telemetry layer
    /// ([`Observed`]).
    pub fn build(self) -> Result<Observed<KafkaFence>, FenceError> {
        let invalid = |why: String| -> FenceError { InvalidInput::Configuration(why).into() };
        let data_topic = self
            .data_topic
            .ok_or_else(|| invalid("no data topic: call data_topic()".into()))?;
        for (what, topic) in [
            ("data topic", &data_topic),
            ("ledger topic", &self.ledger_topic),
        ] {
            let valid = !topic.is_empty()
                && topic.len() <= 249
                && topic
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !valid {
                return Err(invalid(format!(
                    "{what} `{}` is not a valid Kafka topic name",
                    topic.escape_debug()
                )));
            }
        }
        if self
            .config
            .get("bootstrap.servers")
            .is_none_or(str::is_empty)
        {
            return Err(invalid("the client config has no bootstrap.servers".into()));
        }
        let mechanism = self
            .config
            .get("sasl.mechanism")
            .or_else(|| self.config.get("sasl.mechanisms"));
        if self.context.has_oauth()
            && !mechanism.is_some_and(|m| m.eq_ignore_ascii_case("OAUTHBEARER"))
        {
            return Err(invalid(
                "an OAuth token provider is set, but sasl.mechanism is not OAUTHBEARER: librdkafka would never ask it".into(),
            ));
        }
        if self.config.get("transactional.id").is_some() {
            return Err(invalid(
                "do not set transactional.id: fence-kafka derives one per domain".into(),
            ));
        }
        if self.ledger_partitions < 1
            || self.max_batch_bytes == 0
            || self.timeout.is_zero()
            || self.backoff.base.is_zero()
            || self.backoff.max < self.backoff.base
            || self.transaction_timeout.is_zero()
        {
            return Err(invalid(
                "ledger partitions, batch limit, timeouts and the backoff base must be positive, the backoff cap at least the base".into(),
            ));
        }
        if self.transactional_id_prefix.chars().any(char::is_control) {
            return Err(invalid(
                "the transactional id prefix holds a control character".into(),
            ));
        }
        Ok(Observed::new(KafkaFence {
            inner: Arc::new(Inner {
                clients: Clients::new(self.config, self.context),
                data_topic,
                ledger_topic: self.ledger_topic,
                transactional_id_prefix: self.transactional_id_prefix,
                ledger_partitions_on_create: self.ledger_partitions,
                ledger_replication: self.ledger_replication,
                partitioning: self.partitioning,
                partitions: OnceCell::new(),
                layout_recorded: OnceCell::new(),
                timeout: self.timeout,
                transaction_timeout: self.transaction_timeout,
                max_batch_bytes: self.max_batch_bytes,
                bounds: TokenBounds::new(self.max_token_step, IssuerView::Unchecked),
                op_id_retention: self.op_id_retention,
                aborted_retries: self.aborted_retries,
                backoff: self.backoff,
                holders: crate::holders::Holders::new(self.max_holders),
            }),
        }))
    }

    /// Builds, creates the ledger topic if missing, and checks that both topics exist.
    pub async fn connect(self) -> Result<Observed<KafkaFence>, FenceError> {
        let fence = self.build()?;
        let inner = &fence.inner;
        ensure_topic(
            &inner.clients,
            &inner.ledger_topic,
            inner.ledger_partitions_on_create,
            inner.ledger_replication,
            true,
            inner.timeout,
        )
        .await
        .map_err(|e| backend(None, e))?;
        // Reads both partition counts, checks them against the ledger's layout record and
        // records them there.
        fence.record_layout().await?;
        Ok(fence)
    }
}

impl fmt::Debug for KafkaFenceBuilder {
    // The client config may hold SASL passwords: only the bootstrap servers are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaFenceBuilder")
            .field("bootstrap.servers", &self.config.get("bootstrap.servers"))
            .field("context", &self.context)
            .field("data_topic", &self.data_topic)
            .field("ledger_topic", &self.ledger_topic)
            .finish_non_exhaustive()
    }
}
