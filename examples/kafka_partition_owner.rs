//! A partition-owner worker: under its lease it owns "partition 7" of an order stream and
//! publishes events in transactions carrying its fencing token. When it stalls and a new owner
//! takes over, its late batch is fenced and never visible to read_committed consumers.
//!
//! `cargo run --features servers --example kafka_partition_owner` (Kafka at `FENCE_KAFKA_BOOTSTRAP`, else the
//! project's broker: `scripts/services up`); the run's topics are deleted at the end, after
//! success, an error or ctrl-c/SIGTERM alike.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_core::{
    AppendRequest, Domain, Fence, FencedLog, LeaseGuard, LeaseManager, LeaseOptions, MemoryLeases,
    Observed, OperationId, OwnerId, Record,
};
use fence_examples::{local, Timeline, Unreachable};
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::KafkaFence;

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
kafka_partition_owner: the owner of \"partition 7\" publishes events in transactions carrying
its token; after a takeover its late batch is fenced and never visible to read_committed
consumers. The run's topics are deleted at the end.

Usage: cargo run --features servers --example kafka_partition_owner";

/// The worker's fence on the broker at `FENCE_KAFKA_BOOTSTRAP` (else the project's): events go
/// to this run's `topic`, the fence's marks to `<topic>-ledger`, which the fence creates. SASL,
/// TLS or any other librdkafka setting goes on the same `ClientConfig`;
/// `KafkaFenceBuilder::from_env()` reads them from the `FENCE_KAFKA_*` variables.
async fn connect(topic: &str) -> Result<Observed<KafkaFence>, Error> {
    let bootstrap = std::env::var("FENCE_KAFKA_BOOTSTRAP")
        .unwrap_or_else(|_| local::KAFKA_BOOTSTRAP.to_owned());
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &bootstrap)
        .set("socket.connection.setup.timeout.ms", "3000");
    // An application's topics exist before it runs; this run makes its own.
    fence_examples::create_kafka_topics(&config, &[topic]).await?;
    let fence = KafkaFence::builder(config)
        .data_topic(topic)
        .ledger_topic(format!("{topic}-ledger"))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| Unreachable::new("Kafka", &bootstrap, "FENCE_KAFKA_BOOTSTRAP", e))?;
    Ok(fence)
}

fn events(owner: &str, from: usize, count: usize) -> Vec<Record> {
    (from..from + count)
        .map(|i| {
            Record::new(format!("order-{i} shipped (published by {owner})"))
                .with_key(format!("order-{i}"))
        })
        .collect()
}

async fn story() -> Result<(), Error> {
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let fence = connect(&format!("orders-{run}")).await?;
    let partition = Domain::new("orders/partition-7")?;
    let outcome = fence_examples::until_shutdown(takeover(&fence, &partition)).await;
    // After success, an error or a signal alike: the run's topics go.
    let cleanup = fence_examples::delete_kafka_topics(&fence)
        .await
        .map(|()| println!("cleaned up: the run's topics deleted"))
        .map_err(Into::into);
    fence_examples::after_cleanup(outcome, cleanup)
}

/// Worker 1 publishes, stalls past its lease, worker 2 takes over and publishes; worker 1's
/// late batch is refused.
async fn takeover(fence: &Observed<KafkaFence>, partition: &Domain) -> Result<(), Error> {
    // Any lease service: the broker enforces the token.
    let leases: Arc<dyn LeaseManager> = Arc::new(Observed::new(MemoryLeases::new()));
    let clock = Timeline::start();

    // Worker 1's lease is taken by hand, so that the story can freeze worker 1 without freezing
    // a renewer; a real worker holds a `LeaseGuard` (worker 2).
    let first = leases
        .acquire(
            partition,
            &OwnerId::new("worker-1")?,
            Duration::from_millis(200),
        )
        .await?;
    fence.claim(partition, first.token).await?;
    clock.say(
        "w1",
        format!("owns the partition with token {}", first.token),
    );
    let batch = AppendRequest::new(partition.clone(), first.token, events("worker-1", 0, 100))
        .with_op_id(OperationId::new("batch-0")?);
    fence.append(&batch).await?;
    clock.say("w1", "published 100 events in one transaction");

    tokio::time::sleep(Duration::from_millis(300)).await; // worker 1 stalls past its lease
    let options = LeaseOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
    let second = LeaseGuard::acquire(
        leases.clone(),
        partition,
        &OwnerId::new("worker-2")?,
        options,
    )
    .await?;
    fence.claim(partition, second.token()).await?;
    clock.say("w2", format!("took over with token {}", second.token()));
    fence
        .append(&AppendRequest::new(
            partition.clone(),
            second.token(),
            events("worker-2", 100, 50),
        ))
        .await?;
    clock.say("w2", "published 50 events");

    match fence
        .append(&AppendRequest::new(
            partition.clone(),
            first.token,
            events("worker-1", 100, 50),
        ))
        .await
    {
        Err(error) if error.is_fenced() => clock.say(
            "w1",
            format!("wakes up and publishes its next batch: {error}"),
        ),
        other => return Err(format!("the stale batch was not fenced: {other:?}").into()),
    }
    let committed = fence.read_log(partition).await?;
    let by_worker_1 = committed.iter().filter(|e| e.token == first.token).count();
    let by_worker_2 = committed
        .iter()
        .filter(|e| e.token == second.token())
        .count();
    println!("read_committed sees {} events: {by_worker_1} from worker 1 (before the takeover), {by_worker_2} from worker 2", committed.len());
    second.release().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fence_examples::run_example("kafka_partition_owner", USAGE, async {
        fence_examples::no_arguments()?;
        story().await.map(|()| true)
    })
    .await
}
