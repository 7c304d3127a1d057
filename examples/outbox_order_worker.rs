//! The outbox story: an order worker, under its lease, marks an order paid and records a "send
//! receipt email" effect in the same fenced step. A relay (itself a lease holder) delivers the
//! receipt to a local webhook with an Idempotency-Key. A worker that paused past its lease
//! wakes up and tries the same: the resource rejects it, and no receipt is recorded or sent.
//!
//! `cargo run --features servers --example outbox_order_worker [-- --backend redis|kafka|postgres]`
//! (Redis at `FENCE_REDIS_URL`, Kafka at `FENCE_KAFKA_BOOTSTRAP`, PostgreSQL at
//! `FENCE_POSTGRES_URL`, each else the project's server: `scripts/services up`). Ctrl-c or
//! SIGTERM stops the story; what the run created is removed in every case.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fence_core::{
    Domain, FencingToken, LeaseGuard, LeaseManager, LeaseOptions, MemoryLeases, Observed, OwnerId,
    Record,
};
use fence_examples::{
    kafka_fence_for_run, postgres_fence, redis_fence, run_example, settled_entries, ReceiptWebhook,
    Timeline, POSTGRES_SCHEMA,
};
use fence_outbox::{
    DestinationRule, Effect, EffectKinds, EntryStatus, OutboxEntry, OutboxError, OutboxStore,
    Relay, RelayConfig, WebhookSink,
};
use fence_outbox_kafka::{KafkaOutbox, KafkaRelayStore, KafkaTransition};
use fence_outbox_postgres::PostgresOutbox;
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};
use fence_postgres::{Begun, TransactionRequest};

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
outbox_order_worker: an order worker marks an order paid and records a \"send receipt\" effect
in the same fenced step; a relay delivers it once to a local webhook; a worker that paused past
its lease tries the same and is refused: no second receipt is recorded or sent.

Usage: cargo run --features servers --example outbox_order_worker [-- --backend redis|kafka|postgres]";

const LEASE: Duration = Duration::from_millis(300);

/// The order store, on one of the backends with an atomic outbox.
enum Orders {
    Redis(RedisOutbox),
    Kafka(KafkaOutbox, Arc<KafkaRelayStore>),
    Postgres(PostgresOutbox),
}

impl Orders {
    async fn open(backend: &str) -> Result<(Orders, Arc<dyn LeaseManager>, String), Error> {
        let kinds = EffectKinds::new().register("send-receipt-email", DestinationRule::HttpUrl)?;
        match backend {
            "redis" => {
                let fence = redis_fence().await?;
                let description = format!("redis at {}", fence.target());
                let leases: Arc<dyn LeaseManager> = Arc::new(fence.leases());
                Ok((
                    Orders::Redis(RedisOutbox::new(fence, kinds)),
                    leases,
                    description,
                ))
            }
            "kafka" => {
                let fence = kafka_fence_for_run("fence-outbox-demo").await?;
                let description = format!("kafka topic {}", fence.data_topic());
                let outbox = KafkaOutbox::new(fence, kinds);
                let store = Arc::new(outbox.relay_store("receipts", 0)?);
                // One process: in-memory leases are enough for the story; use a durable
                // lease store (RedisLeases) across processes.
                let leases: Arc<dyn LeaseManager> = Arc::new(Observed::new(MemoryLeases::new()));
                Ok((Orders::Kafka(outbox, store), leases, description))
            }
            "postgres" => {
                let fence = postgres_fence().await?;
                fence_outbox_postgres::migrate(&fence).await?;
                sqlx::query(&format!(
                    "CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA}.orders \
                     (id text PRIMARY KEY, status text NOT NULL)"
                ))
                .execute(fence.pool())
                .await?;
                let description = format!("postgres schema `{}`", fence.schema());
                let leases: Arc<dyn LeaseManager> = Arc::new(fence.leases());
                Ok((
                    Orders::Postgres(PostgresOutbox::new(fence, kinds)),
                    leases,
                    description,
                ))
            }
            other => Err(format!("unknown backend `{other}`: use redis, kafka or postgres").into()),
        }
    }

    /// Marks `order` paid by `worker` and records the receipt effect, in one fenced step.
    async fn pay(
        &self,
        order: &Domain,
        token: FencingToken,
        worker: &str,
        receipt_url: &str,
    ) -> Result<String, OutboxError> {
        let op = fence_core::OperationId::new(format!("pay-by-{worker}"))?;
        let receipt = Effect::new(
            "send-receipt-email",
            receipt_url,
            format!("{{\"order\":\"{order}\",\"paid_by\":\"{worker}\"}}"),
        );
        match self {
            Orders::Redis(outbox) => {
                let transition = RedisTransition::new(order.clone(), token, op)
                    .key("order")
                    .arg("status")
                    .arg(format!("paid by {worker}"))
                    .effect(receipt);
                let recorded = outbox
                    .transition(&OutboxScript::hset(), &transition)
                    .await?;
                Ok(format!(
                    "entry {:?} key {}",
                    recorded.seqs, recorded.keys[0]
                ))
            }
            Orders::Kafka(outbox, _) => {
                let transition = KafkaTransition::new(order.clone(), token, op)
                    .record(Record::new(format!("paid by {worker}")))
                    .effect(receipt);
                let recorded = outbox.transition(&transition).await?;
                Ok(format!("key {}", recorded.keys[0]))
            }
            Orders::Postgres(outbox) => {
                // The order row and the receipt entry commit in one fenced transaction.
                let request = TransactionRequest::new(order.clone(), token).with_op_id(op);
                let Begun::Admitted(mut tx) = outbox.fence().begin(&request).await? else {
                    return Ok("recorded before".into());
                };
                sqlx::query(&format!(
                    "INSERT INTO {POSTGRES_SCHEMA}.orders (id, status) VALUES ($1, $2) \
                     ON CONFLICT (id) DO UPDATE SET status = excluded.status"
                ))
                .bind(order.as_str())
                .bind(format!("paid by {worker}"))
                .execute(&mut *tx)
                .await
                .map_err(|e| tx.sql_error(e))?;
                let keys = outbox.record(&mut tx, &[receipt]).await?;
                tx.commit().await?;
                Ok(format!("key {}", keys[0]))
            }
        }
    }

    fn relay_store(&self) -> Arc<dyn OutboxStore> {
        match self {
            Orders::Redis(outbox) => Arc::new(outbox.clone()),
            Orders::Kafka(_, store) => store.clone(),
            Orders::Postgres(outbox) => Arc::new(outbox.clone()),
        }
    }

    /// Removes what the run created: the order's keys or rows (its outbox entries with
    /// them), or the run's Kafka topics.
    async fn finish(&self, order: &Domain) -> Result<(), Error> {
        match self {
            Orders::Redis(outbox) => fence_examples::retire_run(outbox.fence(), order).await,
            Orders::Kafka(outbox, _) => fence_examples::delete_kafka_topics(outbox.fence())
                .await
                .map_err(Into::into),
            Orders::Postgres(outbox) => {
                fence_examples::retire_postgres_run(outbox.fence(), "orders", order).await
            }
        }
    }

    async fn entries(&self, order: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        match self {
            Orders::Redis(outbox) => outbox.entries(order).await,
            Orders::Kafka(_, store) => store.entries(order).await,
            Orders::Postgres(outbox) => outbox.entries(order).await,
        }
    }
}

async fn story() -> Result<bool, Error> {
    let backend = fence_examples::backend_arg("redis")?;
    let (orders, leases, description) = Orders::open(&backend).await?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let order = Domain::new(format!("order-42/run-{run}"))?;
    let outcome =
        fence_examples::until_shutdown(payment(&orders, leases, &description, &order)).await;
    // After success, an error or a signal alike: what the run created goes.
    let cleanup = orders.finish(&order).await;
    fence_examples::after_cleanup(outcome, cleanup)
}

/// Worker A pauses past its lease, worker B pays the order and records its receipt, the relay
/// delivers it; A's late step is refused. True when everything went as the story expects.
async fn payment(
    orders: &Orders,
    leases: Arc<dyn LeaseManager>,
    description: &str,
    order: &Domain,
) -> Result<bool, Error> {
    let clock = Timeline::start();
    let webhook = ReceiptWebhook::start(clock).await?;
    println!("Fence outbox demo: pay an order and send its receipt, exactly once");
    println!(
        "backend: {description}; order `{order}`; receipt webhook {}",
        webhook.url()
    );

    let a = leases
        .acquire(order, &OwnerId::new("worker-a")?, LEASE)
        .await?;
    clock.say(
        "A",
        format!(
            "acquired the order lease ({LEASE:?}) with token {}",
            a.token
        ),
    );
    clock.say("A", "pauses (GC) before recording \"paid + send receipt\"");

    // B's guard waits for A's lease to end, then keeps B's renewed.
    let options = LeaseOptions::new(LEASE).wait(Duration::from_secs(10));
    let b = LeaseGuard::acquire(leases.clone(), order, &OwnerId::new("worker-b")?, options).await?;
    clock.say(
        "B",
        format!("acquired the order lease with token {}", b.token()),
    );
    let recorded = orders
        .pay(order, b.token(), "worker-b", &webhook.url())
        .await?;
    clock.say(
        "B",
        format!("order marked paid + receipt recorded in the same step: {recorded}"),
    );

    let relay_config = RelayConfig::new("receipts", OwnerId::new("relay-1")?)
        .lease_ttl(Duration::from_secs(2))
        .delivery_timeout(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(25));
    let sink = Arc::new(WebhookSink::new()?.timeout(Duration::from_secs(1)));
    // Dropped if a signal interrupts the story, the handle stops the relay: it must not run on
    // during the cleanup.
    let relay = Relay::new(orders.relay_store(), sink, leases.clone(), relay_config)?.spawn();
    clock.say(
        "R",
        "relay started: it takes the relay lease and delivers pending receipts",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    webhook.wait_for_first(Duration::from_secs(20)).await;

    clock.say(
        "A",
        "resumes, unaware its lease expired, and records \"paid + send receipt\"",
    );
    let stale = orders.pay(order, a.token, "worker-a", &webhook.url()).await;
    let fenced = matches!(&stale, Err(error) if error.is_fenced());
    match &stale {
        Ok(outcome) => clock.say("A", format!("recorded?! {outcome}")),
        Err(error) => clock.say("A", format!("REJECTED: {error}")),
    }

    let settled = settled_entries(deadline, || orders.entries(order)).await?;
    let report = relay.shutdown().await?;
    let (applied, requests) = webhook.counts();
    clock.say(
        "R",
        format!(
            "relay stopped: {} delivered, {} retried, {} dead-lettered",
            report.delivered, report.retried, report.dead_lettered
        ),
    );
    let delivered = settled
        .iter()
        .filter(|e| matches!(e.status, EntryStatus::Delivered { .. }))
        .count();
    println!(
        "outbox entries for the order: {} ({delivered} delivered); receipts sent by the webhook: {applied} ({requests} requests)",
        settled.len()
    );
    b.release().await?;
    let ok = fenced && settled.len() == 1 && delivered == 1 && applied == 1;
    if ok {
        println!("the paused worker's step was rejected: one order payment, one receipt");
    } else {
        println!(
            "UNEXPECTED: fenced={fenced}, entries={}, delivered={delivered}, receipts={applied}",
            settled.len()
        );
    }
    Ok(ok)
}

#[tokio::main]
async fn main() -> ExitCode {
    run_example("outbox_order_worker", USAGE, story()).await
}
