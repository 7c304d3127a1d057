//! Which of the Kafka ACLs the fence needs its principal has: each used for real, with a probe
//! transactional id and a transaction that is aborted (read_committed consumers never see its
//! records).

use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fence_core::permissions::{Access, Permission, PermissionReport, PROBE_SEGMENT};
use fence_core::FenceError;
use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use crate::client::{blocking, partition_count, read_partition};
use crate::context::KafkaContext;
use crate::error::{backend, BACKEND};
use crate::KafkaFence;

/// The key of the probe's records: NUL-led, so no domain's (domains hold no control character).
const PROBE_KEY: &[u8] = b"\0permission-probe";

/// The fence's context, which also keeps the delivery results of the probe's records.
#[derive(Clone)]
struct ProbeContext {
    inner: KafkaContext,
    /// The last record's delivery result.
    delivered: Arc<Mutex<Option<Result<(), KafkaError>>>>,
}

impl ClientContext for ProbeContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>> {
        self.inner.generate_oauth_token(config)
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.inner.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.inner.error(error, reason);
    }
}

impl ProducerContext for ProbeContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Ok(mut delivered) = self.delivered.lock() {
            *delivered = Some(
                result
                    .as_ref()
                    .map(|_| ())
                    .map_err(|(error, _)| error.clone()),
            );
        }
    }
}

impl KafkaFence {
    /// Uses each ACL the fence needs and reports which the cluster refused: `Describe` on the
    /// data and ledger topics, `Read` on the ledger topic, `Write` on the transactional ids
    /// `<prefix>:…` (a probe id no domain has, `<prefix>:!permission-probe`, is initialised) and
    /// `Write` on both topics (one record each, in a transaction that is then aborted). See the
    /// crate docs, "Permissions" (also `IdempotentWrite` on the cluster for brokers before 2.8,
    /// and `Create` on the ledger topic when [`crate::KafkaFenceBuilder::connect`] creates it).
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let (data, ledger) = (
            self.inner.data_topic.clone(),
            self.inner.ledger_topic.clone(),
        );
        // `<prefix>:!permission-probe`: under the prefix the ACL grants, but no domain's id (an
        // escaped domain has no `!`), so initialising it fences no one.
        let transactional_id = format!("{}:{PROBE_SEGMENT}", self.inner.transactional_id_prefix);
        let mut report = PermissionReport::new(BACKEND, format!("topics {data} and {ledger}"));
        let timeout = self.inner.timeout;
        let mut topics_exist = true;
        for topic in [&data, &ledger] {
            let (clients, name) = (self.inner.clients.clone(), topic.clone());
            let described = blocking(move || partition_count(&clients, &name, timeout))
                .await
                .and_then(|r| r)
                .map_err(|e| backend(None, e));
            topics_exist &= described.is_ok();
            report.push(Permission::new(
                format!("Describe on Topic {topic}"),
                "partition counts, watermarks",
                Access::of(&described),
            ));
        }
        let (clients, name) = (self.inner.clients.clone(), ledger.clone());
        let read = blocking(move || read_partition(&clients, &name, 0, 0, timeout))
            .await
            .and_then(|r| r)
            .map_err(|e| backend(None, e));
        report.push(Permission::new(
            format!("Read on Topic {ledger}"),
            "every claim and append reads the domain's ledger record",
            Access::of(&read),
        ));

        let context = ProbeContext {
            inner: self.inner.clients.context.for_client(),
            delivered: Arc::default(),
        };
        let (config, id) = (self.inner.clients.config.clone(), transactional_id.clone());
        let transaction_timeout = self.inner.transaction_timeout;
        let initialised = blocking(move || {
            let producer: ThreadedProducer<ProbeContext> = config
                .clone()
                .set("transactional.id", &id)
                .set(
                    "transaction.timeout.ms",
                    transaction_timeout.as_millis().to_string(),
                )
                .create_with_context(context)?;
            producer.init_transactions(transaction_timeout)?;
            Ok::<_, KafkaError>(producer)
        })
        .await
        .and_then(|r| r.map_err(Into::into))
        .map_err(|e| backend(None, e));
        report.push(Permission::new(
            format!(
                "Write on TransactionalId {transactional_id} (grant the prefix {}:)",
                self.inner.transactional_id_prefix
            ),
            "one transactional producer per domain",
            Access::of(&initialised),
        ));
        let writes = match initialised {
            // Producing to a missing topic could create it: the probe writes only to topics
            // it saw.
            Ok(_) if !topics_exist => {
                vec![Access::Unknown("not tried: a topic could not be described".into()); 2]
            }
            Ok(producer) => {
                let topics = vec![data.clone(), ledger.clone()];
                blocking(move || probe_writes(&producer, &topics, timeout))
                    .await
                    .map_err(|e| backend(None, e))?
                    .into_iter()
                    .map(|outcome| Access::of(&outcome.map_err(|e| backend(None, e))))
                    .collect::<Vec<_>>()
            }
            Err(_) => {
                vec![Access::Unknown("no producer: its transactional id was refused".into()); 2]
            }
        };
        for (topic, access) in [&data, &ledger].into_iter().zip(writes) {
            report.push(Permission::new(
                format!("Write on Topic {topic}"),
                "appends and ledger records, in transactions",
                access,
            ));
        }
        Ok(report)
    }
}

/// For each topic, one record to its partition 0 in a transaction of its own, delivered
/// (flushed), then aborted: never committed. What each write came to. Blocking.
fn probe_writes(
    producer: &ThreadedProducer<ProbeContext>,
    topics: &[String],
    timeout: Duration,
) -> Vec<Result<(), KafkaError>> {
    let context = producer.context();
    topics
        .iter()
        .map(|topic| {
            if let Ok(mut delivered) = context.delivered.lock() {
                *delivered = None;
            }
            producer.begin_transaction()?;
            let record = BaseRecord::<[u8], [u8]>::to(topic)
                .partition(0)
                .key(PROBE_KEY)
                .payload(b"fence permission probe (aborted)");
            let sent = producer.send(record).map_err(|(error, _)| error);
            let _ = producer.flush(timeout);
            // The report reaches the context on the producer's own thread: wait for it.
            let deadline = std::time::Instant::now() + timeout;
            let delivered = loop {
                let now = context.delivered.lock().ok().and_then(|d| d.clone());
                if now.is_some() || std::time::Instant::now() > deadline {
                    break now;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let outcome = match (sent, delivered) {
                (Ok(()), Some(Ok(()))) => Ok(()),
                // A refused partition purges the record without saying why; the commit says.
                // It cannot succeed: librdkafka fails the commit of a transaction one of whose
                // records failed, so nothing is committed.
                (Ok(()), Some(Err(purged))) => match producer.commit_transaction(timeout) {
                    Err(refusal) => Err(refusal),
                    Ok(()) => Err(purged),
                },
                (Ok(()), None) => Err(KafkaError::MessageProduction(
                    rdkafka::error::RDKafkaErrorCode::MessageTimedOut,
                )),
                (Err(error), _) => Err(error),
            };
            // Never committed otherwise: the probe's records stay invisible to read_committed.
            let _ = producer.abort_transaction(timeout);
            outcome
        })
        .collect()
}
