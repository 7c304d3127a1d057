//! A partition-owner worker: under its lease it owns "partition 7" of an order stream and
//! publishes events in transactions carrying its fencing token. When it stalls and a new owner
//! takes over, its late batch is fenced and never visible to read_committed consumers.
//!
//! `cargo run --features servers --example kafka_partition_owner` (Kafka at `FENCE_KAFKA_BOOTSTRAP`, else the
//! project's broker: `scripts/services up`); the run's topics are deleted at the end.

use std::time::Duration;

use fence_core::{
    AppendRequest, Domain, Fence, FencedLog, LeaseManager, MemoryLeases, Observed, OperationId,
    OwnerId, Record,
};
use fence_examples::{kafka_fence_for_run, Timeline};

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
kafka_partition_owner: the owner of \"partition 7\" publishes events in transactions carrying
its token; after a takeover its late batch is fenced and never visible to read_committed
consumers. The run's topics are deleted at the end.

Usage: cargo run --features servers --example kafka_partition_owner";

fn events(owner: &str, from: usize, count: usize) -> Vec<Record> {
    (from..from + count)
        .map(|i| {
            Record::new(format!("order-{i} shipped (published by {owner})"))
                .with_key(format!("order-{i}"))
        })
        .collect()
}

async fn story() -> Result<(), Error> {
    let fence = kafka_fence_for_run("orders").await?;
    let leases = Observed::new(MemoryLeases::new()); // any lease service: the broker enforces the token
    let partition = Domain::new("orders/partition-7")?;
    let clock = Timeline::start();

    let first = leases
        .acquire(
            &partition,
            &OwnerId::new("worker-1")?,
            Duration::from_millis(200),
        )
        .await?;
    fence.claim(&partition, first.token).await?;
    clock.say(
        "w1",
        format!("owns the partition with token {}", first.token),
    );
    let batch = AppendRequest::new(partition.clone(), first.token, events("worker-1", 0, 100))
        .with_op_id(OperationId::new("batch-0")?);
    fence.append(&batch).await?;
    clock.say("w1", "published 100 events in one transaction");

    tokio::time::sleep(Duration::from_millis(300)).await; // worker 1 stalls past its lease
    let second = leases
        .acquire(
            &partition,
            &OwnerId::new("worker-2")?,
            Duration::from_secs(10),
        )
        .await?;
    fence.claim(&partition, second.token).await?;
    clock.say("w2", format!("took over with token {}", second.token));
    fence
        .append(&AppendRequest::new(
            partition.clone(),
            second.token,
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
    let committed = fence.read_log(&partition).await?;
    let by_worker_1 = committed.iter().filter(|e| e.token == first.token).count();
    let by_worker_2 = committed.iter().filter(|e| e.token == second.token).count();
    println!("read_committed sees {} events: {by_worker_1} from worker 1 (before the takeover), {by_worker_2} from worker 2", committed.len());
    fence_examples::delete_kafka_topics(&fence).await?;
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
