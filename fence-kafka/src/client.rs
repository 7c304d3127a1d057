//! Blocking librdkafka calls, run on tokio's blocking pool so the async runtime never stalls.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::context::KafkaContext;
use crate::error::KafkaFenceError;
use crate::record::CommittedRecord;

/// A transactional producer for one domain's transactional id.
pub(crate) type TxnProducer = ThreadedProducer<KafkaContext>;

/// What every client fence-kafka opens is made of: the user's configuration and context.
#[derive(Clone, Debug)]
pub(crate) struct Clients {
    pub(crate) config: ClientConfig,
    pub(crate) context: KafkaContext,
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
/// sees it, read up to the high watermark taken at the start (which counts transaction markers,
/// so the end is a position, not a record).
pub(crate) fn read_partition(
    clients: &Clients,
    topic: &str,
    partition: i32,
    from: i64,
    timeout: Duration,
) -> Result<Vec<CommittedRecord>, KafkaError> {
    let consumer: BaseConsumer<KafkaContext> = clients
        .config
        .clone()
        .set("group.id", "fence-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create_with_context(clients.context.for_client())?;
    serve_token(&consumer, timeout);
    let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
    let start = from.max(low);
    if high <= start {
        return Ok(Vec::new());
    }
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Offset(start))?;
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + timeout;
    let mut messages = Vec::new();
    loop {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(message)) => messages.push(CommittedRecord::from_message(&message)),
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(error)) => return Err(error),
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
            return Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::OperationTimedOut,
            ));
        }
    }
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
    Ok(())
}
