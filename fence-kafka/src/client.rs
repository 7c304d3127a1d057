//! Blocking librdkafka calls, run on tokio's blocking pool so the async runtime never stalls.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::context::{Acked, KafkaContext};
use crate::error::KafkaFenceError;
use crate::record::CommittedRecord;

/// A transactional producer for one domain's transactional id.
pub(crate) type TxnProducer = ThreadedProducer<KafkaContext>;

/// What every client fence-kafka opens is made of: the user's configuration and context, and
/// the long-lived clients that only ask for watermarks.
#[derive(Clone, Debug)]
pub(crate) struct Clients {
    pub(crate) config: ClientConfig,
    pub(crate) context: KafkaContext,
    pub(crate) watermarks: Arc<WatermarkClients>,
}

impl Clients {
    pub(crate) fn new(config: ClientConfig, context: KafkaContext) -> Self {
        Clients {
            config,
            context,
            watermarks: Arc::default(),
        }
    }
}

/// One watermark client per isolation level, made on first use and kept while it answers:
/// every commit that moves the ledger asks for two watermarks, and a client per question
/// would cost a connection each. A client that failed is dropped (it may still name a dead
/// leader; a new one reads fresh metadata). Not kept under a token provider, whose tokens
/// only a polled client refreshes.
#[derive(Default)]
pub(crate) struct WatermarkClients {
    committed: Mutex<Option<Arc<BaseConsumer<KafkaContext>>>>,
    uncommitted: Mutex<Option<Arc<BaseConsumer<KafkaContext>>>>,
}

impl std::fmt::Debug for WatermarkClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatermarkClients").finish_non_exhaustive()
    }
}

/// Runs a blocking librdkafka call on the blocking pool.
pub(crate) async fn blocking<T, F>(call: F) -> Result<T, KafkaFenceError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| KafkaFenceError::Worker(e.to_string()))
}

/// A transactional producer with `transactional_id`, initialised (which fences every earlier
/// producer of that id and aborts its open transaction).
pub(crate) fn transactional_producer(
    clients: &Clients,
    transactional_id: &str,
    transaction_timeout: Duration,
) -> Result<TxnProducer, KafkaError> {
    let producer: TxnProducer = clients
        .config
        .clone()
        .set("transactional.id", transactional_id)
        .set(
            "transaction.timeout.ms",
            transaction_timeout.as_millis().to_string(),
        )
        .set(
            "message.timeout.ms",
            transaction_timeout.as_millis().to_string(),
        )
        .set("linger.ms", "2")
        .create_with_context(clients.context.for_client())?;
    producer.init_transactions(transaction_timeout)?;
    Ok(producer)
}

/// Every committed message of one partition from offset `from`, as a read_committed consumer
/// sees it, read up to the partition's high watermark taken at the start (a position that
/// counts transaction markers, so the end is a position, not a record).
///
/// The end is the high watermark, never the last stable offset that librdkafka reports to a
/// read_committed client: an open transaction anywhere before the end (another domain's
/// holder sharing the partition, or one whose markers a broker crash left unwritten) holds
/// the stable offset back, and a read that stopped there would miss marks committed after it.
/// The read waits for such transactions to be decided, and fails closed
/// ([`KafkaFenceError::ReadIncomplete`]) when they are not within `timeout`.
pub(crate) fn read_partition(
    clients: &Clients,
    topic: &str,
    partition: i32,
    from: i64,
    timeout: Duration,
) -> Result<Vec<CommittedRecord>, KafkaFenceError> {
    read(
        clients,
        Isolation::Committed,
        topic,
        partition,
        from,
        timeout,
        false,
    )
}

/// [`read_partition`] with `isolation`, stopping at the first record when `first_only`.
fn read(
    clients: &Clients,
    isolation: Isolation,
    topic: &str,
    partition: i32,
    from: i64,
    timeout: Duration,
    first_only: bool,
) -> Result<Vec<CommittedRecord>, KafkaFenceError> {
    let deadline = Instant::now() + timeout;
    let (low, high) = high_watermark(clients, topic, partition, timeout)?;
    let start = from.max(low);
    if high <= start {
        return Ok(Vec::new());
    }
    let consumer = reader(clients, isolation)?;
    serve_token(&consumer, left(deadline));
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Offset(start))?;
    consumer.assign(&assignment)?;
    let mut messages = Vec::new();
    loop {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(message)) => {
                messages.push(CommittedRecord::from_message(&message));
                if first_only {
                    return Ok(messages);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            // Reports of a lost connection that librdkafka re-establishes by itself (measured:
            // AllBrokersDown from a fresh reader on a loaded machine): the read goes on, and
            // fails as incomplete if the deadline passes first.
            Some(Err(error)) if reconnecting(&error) => {}
            Some(Err(error)) => return Err(error.into()),
        }
        let position = consumer
            .position()?
            .find_partition(topic, partition)
            .and_then(|p| match p.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
            .unwrap_or(start);
        if position >= high {
            return Ok(messages);
        }
        if Instant::now() > deadline {
            return Err(KafkaFenceError::ReadIncomplete {
                topic: topic.to_owned(),
                partition,
                reached: position,
                end: high,
            });
        }
    }
}

/// True for a consumer error that reports a connection librdkafka is re-establishing, not an
/// answer from the broker.
fn reconnecting(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
        )
    )
}

/// Whether the record the broker acknowledged at `acked` is committed, read back once its
/// transaction is decided: a read_committed reader from its offset meets it first if its
/// transaction committed and skips it if it aborted — or if the record is no longer in the log
/// (compacted or deleted since), which a read_uncommitted reader tells apart. Fails when the
/// transaction is not decided within `timeout`, and when the record is not in the log.
pub(crate) fn committed_at(
    clients: &Clients,
    acked: &Acked,
    timeout: Duration,
) -> Result<bool, KafkaFenceError> {
    let first = |isolation| {
        read(
            clients,
            isolation,
            &acked.topic,
            acked.partition,
            acked.offset,
            timeout,
            true,
        )
        .map(|records| records.first().map(|r| r.offset))
    };
    if acked.offset >= 0 {
        if first(Isolation::Committed)? == Some(acked.offset) {
            return Ok(true);
        }
        if first(Isolation::Uncommitted)? == Some(acked.offset) {
            return Ok(false);
        }
    }
    Err(KafkaFenceError::Unverifiable {
        topic: acked.topic.clone(),
        partition: acked.partition,
        offset: acked.offset,
    })
}

/// Waits until read_committed readers of the partition see through to the end it has now:
/// every transaction before it is decided and its markers are in the log. Any producer's open
/// transaction on the partition holds it back, until that producer ends it or the broker
/// aborts it (its `transaction.timeout.ms`, checked every
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`); past `timeout` it fails.
pub(crate) fn settle(
    clients: &Clients,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(), KafkaFenceError> {
    let deadline = Instant::now() + timeout;
    let (_, end) = high_watermark(clients, topic, partition, timeout)?;
    let committed = watermark_client(clients, Isolation::Committed, left(deadline))?;
    let settled = loop {
        let stable = match committed.fetch_watermarks(topic, partition, left(deadline)) {
            Ok((_, stable)) => stable,
            Err(error) => break Err(error.into()),
        };
        if stable >= end {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(KafkaFenceError::ReadIncomplete {
                topic: topic.to_owned(),
                partition,
                reached: stable,
                end,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    keep_watermark_client(clients, Isolation::Committed, committed, settled.is_ok());
    settled
}

/// The time left until `deadline` (at least a millisecond: librdkafka reads 0 as "don't wait").
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// The partition's log start and high watermark, asked with `read_uncommitted` isolation
/// (librdkafka asks with the client's isolation level, and read_committed gets the last
/// stable offset instead of the end).
fn high_watermark(
    clients: &Clients,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(i64, i64), KafkaError> {
    let consumer = watermark_client(clients, Isolation::Uncommitted, timeout)?;
    let answer = consumer.fetch_watermarks(topic, partition, timeout);
    keep_watermark_client(clients, Isolation::Uncommitted, consumer, answer.is_ok());
    answer
}

/// Whether "the end" of a partition is its last stable offset or its high watermark.
#[derive(Clone, Copy)]
enum Isolation {
    Committed,
    Uncommitted,
}

impl Isolation {
    fn kept(self, clients: &Clients) -> &Mutex<Option<Arc<BaseConsumer<KafkaContext>>>> {
        match self {
            Isolation::Committed => &clients.watermarks.committed,
            Isolation::Uncommitted => &clients.watermarks.uncommitted,
        }
    }
}

/// A consumer of the fence's reader configuration with `isolation`, that neither joins a group
/// nor commits offsets.
fn reader(
    clients: &Clients,
    isolation: Isolation,
) -> Result<BaseConsumer<KafkaContext>, KafkaError> {
    clients
        .config
        .clone()
        .set("group.id", "fence-reader")
        .set("enable.auto.commit", "false")
        .set(
            "isolation.level",
            match isolation {
                Isolation::Committed => "read_committed",
                Isolation::Uncommitted => "read_uncommitted",
            },
        )
        .create_with_context(clients.context.for_client())
}

/// The kept watermark client for `isolation` (see [`WatermarkClients`]), or a new one.
fn watermark_client(
    clients: &Clients,
    isolation: Isolation,
    timeout: Duration,
) -> Result<Arc<BaseConsumer<KafkaContext>>, KafkaError> {
    let kept = isolation
        .kept(clients)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(consumer) = kept {
        return Ok(consumer);
    }
    let consumer = reader(clients, isolation)?;
    serve_token(&consumer, timeout);
    Ok(Arc::new(consumer))
}

/// Keeps `consumer` for the next question when it answered (and no token provider is set),
/// drops it otherwise: a client that failed may still name a dead leader.
fn keep_watermark_client(
    clients: &Clients,
    isolation: Isolation,
    consumer: Arc<BaseConsumer<KafkaContext>>,
    answered: bool,
) {
    let keep = answered && !clients.context.has_oauth();
    *isolation
        .kept(clients)
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = keep.then_some(consumer);
}

/// Serves librdkafka's first request for a SASL/OAUTHBEARER token on a consumer that is
/// about to block in a metadata or watermark call, which would otherwise wait for a token that
/// only a poll of its queue hands over (a no-op without a token provider).
fn serve_token(consumer: &BaseConsumer<KafkaContext>, timeout: Duration) {
    if !consumer.context().has_oauth() {
        return;
    }
    let deadline = Instant::now() + timeout;
    while !consumer.context().token_asked() && Instant::now() < deadline {
        // Nothing to read yet: the poll only serves the client's events.
        let _ = consumer.poll(Duration::from_millis(10));
    }
}

/// The number of partitions of `topic`.
pub(crate) fn partition_count(
    clients: &Clients,
    topic: &str,
    timeout: Duration,
) -> Result<i32, KafkaFenceError> {
    let consumer: BaseConsumer<KafkaContext> = clients
        .config
        .create_with_context(clients.context.for_client())?;
    serve_token(&consumer, timeout);
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    // A refused Describe is the topic's own error, not a missing topic.
    if let Some(code) = found.and_then(|t| t.error()).map(RDKafkaErrorCode::from) {
        if code == RDKafkaErrorCode::TopicAuthorizationFailed {
            return Err(KafkaError::MetadataFetch(code).into());
        }
    }
    let partitions = found
        .filter(|t| t.error().is_none())
        .map_or(0, |t| t.partitions().len());
    match i32::try_from(partitions) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(KafkaFenceError::NoSuchTopic(topic.to_owned())),
    }
}

/// Creates `topic` if it is missing; an existing topic is left as it is. With a SASL/OAUTHBEARER
/// token provider the topic must exist already: rust-rdkafka's admin client never serves a
/// token request (fede1024/rust-rdkafka#757), so it could not authenticate.
pub(crate) async fn ensure_topic(
    clients: &Clients,
    topic: &str,
    partitions: i32,
    replication: i32,
    compacted: bool,
    timeout: Duration,
) -> Result<(), KafkaFenceError> {
    if clients.context.has_oauth() {
        let clients = clients.clone();
        let topic = topic.to_owned();
        return blocking(move || partition_count(&clients, &topic, timeout))
            .await?
            .map(|_| ())
            .map_err(|error| match error {
                KafkaFenceError::NoSuchTopic(topic) => KafkaFenceError::NotCreated {
                    topic,
                    why: "with a SASL/OAUTHBEARER token provider fence-kafka cannot create topics (rust-rdkafka's admin client cannot authenticate): create it first",
                },
                other => other,
            });
    }
    let admin: AdminClient<KafkaContext> = clients
        .config
        .create_with_context(clients.context.for_client())?;
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    if compacted {
        new_topic = new_topic.set("cleanup.policy", "compact");
    }
    let options = AdminOptions::new()
        .operation_timeout(Some(timeout))
        .request_timeout(Some(timeout));
    let results = tokio::time::timeout(timeout, admin.create_topics(&[new_topic], &options))
        .await
        .map_err(|_| KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut))??;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code).into()),
        }
    }
    // A topic just created (here or by another process) reaches the brokers' metadata a moment
    // later: wait until this client sees it, so the first read does not take it for missing
    // (seen under load: `NoSuchTopic` right after the creation succeeded).
    let (clients, topic) = (clients.clone(), topic.to_owned());
    blocking(move || {
        let deadline = Instant::now() + timeout;
        loop {
            match partition_count(&clients, &topic, left(deadline)) {
                Err(KafkaFenceError::NoSuchTopic(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                seen => return seen.map(|_| ()),
            }
        }
    })
    .await?
}
