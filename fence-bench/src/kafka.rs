//! Kafka: fenced transactional produce vs the same transactional produce without the fence.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{AppendRequest, Domain, Fence, FencedLog, FencingToken, Record};
use fence_kafka::rdkafka::producer::{
    BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use fence_kafka::KafkaFence;

use crate::measure::{compare, Plan};
use crate::report::Row;

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::skipped("kafka", "all cases", error)],
    }
}

/// One plain transaction: begin, send, commit (blocking).
fn plain_transaction(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    values: &[Bytes],
) -> Result<(), String> {
    producer.begin_transaction().map_err(|e| e.to_string())?;
    for value in values {
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
    producer
        .commit_transaction(Duration::from_secs(30))
        .map_err(|e| e.to_string())
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let config = fence_testkit::kafka::client_config(&bootstrap);
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis();
    let mut rows = Vec::new();
    for (records, rounds, batch) in [(1usize, 6, 10), (100, 4, 5), (1000, 3, 2)] {
        let topic = format!("bench-{run}-{records}");
        fence_testkit::kafka::try_create_topic(&config, &topic, 1).await?;
        let fence = KafkaFence::builder(config.clone())
            .data_topic(&topic)
            .ledger_topic(format!("{topic}-ledger"))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let domain = Domain::new("bench/partition-0").map_err(|e| e.to_string())?;
        fence
            .claim(&domain, FencingToken::MIN)
            .await
            .map_err(|e| e.to_string())?;
        let values: Arc<Vec<Bytes>> = Arc::new(
            (0..records)
                .map(|_| Bytes::from(vec![b'k'; 1024]))
                .collect(),
        );

        let producer: ThreadedProducer<DefaultProducerContext> = config
            .clone()
            .set("transactional.id", format!("bench-plain-{run}-{records}"))
            .set("linger.ms", "2")
            .create()
            .map_err(|e| e.to_string())?;
        let producer = Arc::new(producer);
        let init = producer.clone();
        tokio::task::spawn_blocking(move || init.init_transactions(Duration::from_secs(30)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;

        let plan = Plan {
            rounds,
            batch,
            concurrency: 1,
            group: 1,
        };
        let (f, d, v) = (fence.clone(), domain.clone(), values.clone());
        let (p, t, v2) = (producer.clone(), topic.clone(), values.clone());
        let (fenced, unfenced) = compare(
            plan,
            move |_| {
                let batch: Vec<Record> = v.iter().cloned().map(Record::new).collect();
                let (fence, request) = (
                    f.clone(),
                    AppendRequest::new(d.clone(), FencingToken::MIN, batch),
                );
                async move {
                    fence
                        .append(&request)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
            move |_| {
                let (producer, topic, values) = (p.clone(), t.clone(), v2.clone());
                async move {
                    tokio::task::spawn_blocking(move || {
                        plain_transaction(&producer, &topic, &values)
                    })
                    .await
                    .map_err(|e| e.to_string())?
                }
            },
        )
        .await;
        rows.push(Row::new(
            "kafka",
            format!("transactional produce, {records} record(s)/txn of 1 KiB"),
            &fenced,
            &unfenced,
        ));
    }
    Ok(rows)
}
