//! Kafka: fenced transactional produce vs the same transactional produce without the fence.
//!
//! Besides wall time on the broker (the shared Apache Kafka node of `scripts/services`), each
//! case reports what does not depend on the broker: this client's CPU per transaction, and the records and
//! bytes the fence adds per transaction (fence headers on each record; ledger records when a
//! transaction claims or remembers an op id).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{AppendRequest, Domain, Fence, FencedLog, FencingToken, OperationId, Record};
use fence_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use fence_kafka::rdkafka::producer::{
    BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use fence_kafka::rdkafka::ClientConfig;
use fence_kafka::KafkaFence;

use crate::measure::{compare, Plan};
use crate::probe::Probe;
use crate::report::Row;

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("kafka", "all cases", error)],
    }
}

/// One plain transaction: begin, send (`values` to `topic`, and with `second`, one small
/// record to that topic too), commit (blocking).
fn plain_transaction(
    producer: &ThreadedProducer<DefaultProducerContext>,
    (topic, second): (&str, Option<&str>),
    values: &[Bytes],
) -> Result<(), String> {
    producer.begin_transaction().map_err(|e| e.to_string())?;
    let small = Bytes::from_static(&[b'o'; 64]);
    let sends = values
        .iter()
        .map(|value| (topic, value))
        .chain(second.map(|second| (second, &small)));
    for (topic, value) in sends {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(0)
            .payload(&value[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    record = returned;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    // As the fence commits: rust-rdkafka's own commit waits ~100 ms after a send.
    fence_kafka::commit_when_delivered(producer, Duration::from_secs(30)).map_err(|e| e.to_string())
}

/// The sum of `topic`'s partitions' end offsets (records plus transaction markers).
fn end_offsets(config: &ClientConfig, topic: &str) -> Result<i64, String> {
    let consumer: BaseConsumer = config.create().map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| e.to_string())?;
    let mut total = 0;
    for t in metadata.topics() {
        for p in t.partitions() {
            let (_, high) = consumer
                .fetch_watermarks(topic, p.id(), timeout)
                .map_err(|e| e.to_string())?;
            total += high;
        }
    }
    Ok(total)
}

/// Key and value bytes of every record of the ledger topic (a consumer of its own).
async fn ledger_bytes(config: &ClientConfig, ledger: &str) -> Result<(u64, u64), String> {
    let mut config = config.clone();
    config
        .set("group.id", format!("bench-ledger-{}", ledger))
        .set("auto.offset.reset", "earliest");
    let mut consumer = fence_kafka::FencedConsumer::new(&config, &[ledger])
        .map_err(|e| e.to_string())?
        .allow_unfenced(true);
    let (mut records, mut bytes) = (0, 0);
    while let Ok(record) = tokio::time::timeout(Duration::from_secs(3), consumer.recv()).await {
        let record = record.map_err(|e| e.to_string())?;
        records += 1;
        bytes += (record.key.map_or(0, |k| k.len()) + record.value.len()) as u64;
    }
    Ok((records, bytes))
}

/// What each fenced transaction carries besides its records.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Extra {
    /// The same holder's next batch: no op id, the mark unchanged.
    Nothing,
    /// Each batch with an op id (remembered in the ledger).
    OpId,
    /// Each batch under a new token (a takeover per transaction: the claim is in the ledger).
    NewToken,
}

struct Case {
    records: usize,
    extra: Extra,
    rounds: usize,
    batch: usize,
    /// Transactions in flight at once: each on its own domain (fenced) or its own
    /// transactional producer (plain), as a producer runs one transaction at a time.
    concurrency: usize,
    /// The plain transaction also writes one small record to a second topic: the floor of a
    /// transaction that, like one with an op id, spans two partitions.
    plain_second_partition: bool,
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let config = fence_testkit::kafka::client_config(&bootstrap);
    let run = crate::measure::run_id();
    let probe = Probe::server("kafka/shared/broker.pid");
    let cases = [
        Case {
            records: 1,
            extra: Extra::Nothing,
            rounds: 6,
            batch: 100,
            concurrency: 1,
            plain_second_partition: false,
        },
        Case {
            records: 100,
            extra: Extra::Nothing,
            rounds: 4,
            batch: 40,
            concurrency: 1,
            plain_second_partition: false,
        },
        Case {
            records: 1000,
            extra: Extra::Nothing,
            rounds: 3,
            batch: 10,
            concurrency: 1,
            plain_second_partition: false,
        },
        Case {
            records: 1,
            extra: Extra::OpId,
            rounds: 6,
            batch: 100,
            concurrency: 1,
            plain_second_partition: false,
        },
        Case {
            records: 1,
            extra: Extra::OpId,
            rounds: 6,
            batch: 100,
            concurrency: 1,
            plain_second_partition: true,
        },
        Case {
            records: 1,
            extra: Extra::NewToken,
            rounds: 6,
            batch: 10,
            concurrency: 1,
            plain_second_partition: false,
        },
        Case {
            records: 1,
            extra: Extra::Nothing,
            rounds: 4,
            batch: 128,
            concurrency: 4,
            plain_second_partition: false,
        },
        Case {
            records: 1,
            extra: Extra::Nothing,
            rounds: 3,
            batch: 256,
            concurrency: 16,
            plain_second_partition: false,
        },
    ];
    let mut rows = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        rows.push(run_case(&config, &probe, run, index, case).await?);
    }
    Ok(rows)
}

async fn run_case(
    config: &ClientConfig,
    probe: &Probe,
    run: u128,
    index: usize,
    case: &Case,
) -> Result<Row, String> {
    let topic = format!("bench-{run}-{index}");
    let plain_topic = format!("{topic}-plain");
    let plain_second = format!("{topic}-plain-second");
    let ledger = format!("{topic}-ledger");
    for t in [&topic, &plain_topic, &plain_second] {
        fence_testkit::kafka::try_create_topic(config, t, 1).await?;
    }
    let fence = KafkaFence::builder(config.clone())
        .data_topic(&topic)
        .ledger_topic(&ledger)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut domains = Vec::with_capacity(case.concurrency);
    for slot in 0..case.concurrency {
        let domain = Domain::new(format!("bench/partition-{slot}")).map_err(|e| e.to_string())?;
        fence
            .claim(&domain, FencingToken::MIN)
            .await
            .map_err(|e| e.to_string())?;
        domains.push(domain);
    }
    let domains = Arc::new(domains);
    let values: Arc<Vec<Bytes>> = Arc::new(
        (0..case.records)
            .map(|_| Bytes::from(vec![b'k'; 1024]))
            .collect(),
    );
    let mut producers = Vec::with_capacity(case.concurrency);
    for slot in 0..case.concurrency {
        let producer: ThreadedProducer<DefaultProducerContext> = config
            .clone()
            .set(
                "transactional.id",
                format!("bench-plain-{run}-{index}-{slot}"),
            )
            .set("linger.ms", "2")
            .create()
            .map_err(|e| e.to_string())?;
        let producer = Arc::new(producer);
        let init = producer.clone();
        tokio::task::spawn_blocking(move || init.init_transactions(Duration::from_secs(30)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        producers.push(producer);
    }
    let producers = Arc::new(producers);

    let before = (
        end_offsets(config, &topic)?,
        end_offsets(config, &ledger)?,
        end_offsets(config, &plain_topic)?,
    );
    let plan = Plan {
        rounds: case.rounds,
        batch: case.batch,
        concurrency: case.concurrency,
        group: 1,
    };
    let (f, d, v, extra) = (fence.clone(), domains.clone(), values.clone(), case.extra);
    let next_token = Arc::new(AtomicU64::new(FencingToken::MIN.get()));
    let (p, t, v2) = (producers.clone(), plain_topic.clone(), values.clone());
    let second = case.plain_second_partition.then_some(plain_second);
    let (fenced, unfenced) = compare(
        plan,
        probe,
        move |i| {
            let batch: Vec<Record> = v.iter().cloned().map(Record::new).collect();
            let token = match extra {
                Extra::NewToken => {
                    FencingToken::new(next_token.fetch_add(1, Ordering::Relaxed) + 1)
                }
                _ => Ok(FencingToken::MIN),
            };
            // Task `t` always gets indexes ≡ t (mod concurrency): one domain per task.
            let (fence, domain) = (f.clone(), d[i % d.len()].clone());
            async move {
                let token = token.map_err(|e| e.to_string())?;
                let mut request = AppendRequest::new(domain, token, batch);
                if extra == Extra::OpId {
                    let op = OperationId::new(format!("op-{i}")).map_err(|e| e.to_string())?;
                    request = request.with_op_id(op);
                }
                let appended = fence.append(&request).await.map(|_| ());
                if extra == Extra::NewToken {
                    // The superseded holder's producer is not needed again.
                    fence.release(
                        request.domain(),
                        FencingToken::new(token.get() - 1).unwrap_or(token),
                    );
                }
                appended.map_err(|e| e.to_string())
            }
        },
        move |i| {
            let (producer, topic, values) = (p[i % p.len()].clone(), t.clone(), v2.clone());
            let second = second.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    plain_transaction(&producer, (&topic, second.as_deref()), &values)
                })
                .await
                .map_err(|e| e.to_string())?
            }
        },
    )
    .await;
    let txns = ((case.rounds + 1) * case.batch) as f64;
    let after = (
        end_offsets(config, &topic)?,
        end_offsets(config, &ledger)?,
        end_offsets(config, &plain_topic)?,
    );
    let label = match case.extra {
        Extra::Nothing => format!(
            "transactional produce, {} record(s)/txn of 1 KiB",
            case.records
        ),
        Extra::OpId if case.plain_second_partition => {
            "transactional produce, 1 record/txn with an op id vs a plain txn on two partitions (the floor)"
                .to_owned()
        }
        Extra::OpId => "transactional produce, 1 record/txn with an op id".to_owned(),
        Extra::NewToken => {
            "transactional produce, 1 record/txn under a new token (a takeover each)".to_owned()
        }
    };
    let mut row = Row::new("kafka", label, case.concurrency, &fenced, &unfenced);
    let figures = &mut row.figures;
    figures.insert(
        "data offsets per txn, fenced".into(),
        (after.0 - before.0) as f64 / txns,
    );
    figures.insert(
        "ledger offsets per txn, fenced".into(),
        (after.1 - before.1) as f64 / txns,
    );
    figures.insert(
        "data offsets per txn, plain".into(),
        (after.2 - before.2) as f64 / txns,
    );
    if case.records == 1 && case.concurrency == 1 {
        let records = fence
            .read_committed(0, before.0)
            .await
            .map_err(|e| e.to_string())?;
        let header_bytes: usize = records
            .iter()
            .flat_map(|r| &r.headers)
            .map(|(name, value)| name.len() + value.len())
            .sum();
        figures.insert(
            "fence header bytes per record".into(),
            header_bytes as f64 / records.len().max(1) as f64,
        );
        let (ledger_records, ledger_bytes) = ledger_bytes(config, &ledger).await?;
        figures.insert("ledger records (whole topic)".into(), ledger_records as f64);
        figures.insert("ledger bytes per txn".into(), ledger_bytes as f64 / txns);
    }
    Ok(row)
}
