//! The seeds' own example on PostgreSQL: an account snapshot updated under a lease, in one
//! database transaction with its fencing token, and a "send statement" effect recorded in the
//! same transaction and delivered once. A worker that paused past its lease wakes up and tries
//! the same: its transaction is refused before any of its SQL runs, and the row's own token
//! column refuses its direct `UPDATE` too.
//!
//! `cargo run --features servers --example postgres_account_worker`
//! (PostgreSQL at `FENCE_POSTGRES_URL`, else the project's: `scripts/services up`). The run's
//! rows are removed at the end, after success, an error or ctrl-c/SIGTERM alike.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fence_core::Observed;
use fence_core::{
    Domain, FencingToken, LeaseGuard, LeaseManager, LeaseOptions, OperationId, OwnerId,
};
use fence_examples::{
    local, run_example, settled_entries, ReceiptWebhook, Timeline, Unreachable, POSTGRES_SCHEMA,
};
use fence_outbox::{
    DestinationRule, Effect, EffectKinds, OutboxError, Relay, RelayConfig, WebhookSink,
};
use fence_outbox_postgres::PostgresOutbox;
use fence_postgres::sqlx::postgres::PgPoolOptions;
use fence_postgres::{Begun, PostgresFence, RowFence, TransactionRequest};

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
postgres_account_worker: an account snapshot updated under a lease in one database
transaction with its fencing token, and a \"send statement\" effect recorded in the same
transaction and delivered once; a worker that paused past its lease is refused before any of
its SQL runs, and the row's token column refuses its direct UPDATE too.

Usage: cargo run --features servers --example postgres_account_worker";

const LEASE: Duration = Duration::from_millis(300);

/// The worker's database: `FENCE_POSTGRES_URL`, else the project's. The fence's tables live
/// in [`POSTGRES_SCHEMA`] beside the example's own; `PostgresFenceBuilder::from_env()` reads
/// every `FENCE_POSTGRES_*` variable.
async fn connect() -> Result<Observed<PostgresFence>, Error> {
    let url =
        std::env::var("FENCE_POSTGRES_URL").unwrap_or_else(|_| local::POSTGRES_URL.to_owned());
    let unreachable = |e: Error| Unreachable::new("PostgreSQL", &url, "FENCE_POSTGRES_URL", e);
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(3))
        .connect(&url)
        .await
        .map_err(|e| unreachable(e.into()))?;
    // An example may create the fence's tables; an application runs `fence_postgres::migrate`
    // (or `SCHEMA_SQL`) from its own migrations.
    fence_postgres::migrate(&pool, POSTGRES_SCHEMA)
        .await
        .map_err(|e| unreachable(e.into()))?;
    let fence = PostgresFence::builder(pool, POSTGRES_SCHEMA)
        .build()
        .map_err(|e| unreachable(e.into()))?;
    Ok(fence)
}

/// Under `token`: sets the account's balance (the row's own token column checks the token
/// too) and records the "send statement" effect, in one fenced transaction.
async fn close_month(
    outbox: &PostgresOutbox,
    accounts: &RowFence,
    account: &Domain,
    token: FencingToken,
    balance: i64,
    statement_url: &str,
) -> Result<String, OutboxError> {
    let request = TransactionRequest::new(account.clone(), token)
        .with_op_id(OperationId::new(format!("close-month-{token}"))?);
    let Begun::Admitted(mut tx) = outbox.fence().begin(&request).await? else {
        return Ok("done before".into());
    };
    accounts
        .update(&mut tx, account.as_str().to_owned(), token, |set| {
            set.push("balance = ").push_bind(balance);
        })
        .await?;
    let statement = Effect::new(
        "send-statement",
        statement_url,
        format!("{{\"account\":\"{account}\",\"balance\":{balance}}}"),
    );
    let keys = outbox.record(&mut tx, &[statement]).await?;
    tx.commit().await?;
    Ok(format!("statement key {}", keys[0]))
}

async fn story() -> Result<bool, Error> {
    let fence = connect().await?;
    fence_outbox_postgres::migrate(&fence).await?;
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA}.accounts \
         (id text PRIMARY KEY, balance bigint NOT NULL, fence_token numeric(20,0))"
    ))
    .execute(fence.pool())
    .await?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let account = Domain::new(format!("account-7-run-{run}"))?;
    sqlx::query(&format!(
        "INSERT INTO {POSTGRES_SCHEMA}.accounts (id, balance) VALUES ($1, 100)"
    ))
    .bind(account.as_str())
    .execute(fence.pool())
    .await?;
    let outcome = fence_examples::until_shutdown(month_end(&fence, &account)).await;
    // After success, an error or a signal alike: the run's rows go.
    let cleanup = fence_examples::retire_postgres_run(&fence, "accounts", &account).await;
    fence_examples::after_cleanup(outcome, cleanup)
}

/// Worker A pauses past its lease, worker B closes the month and the relay delivers the
/// statement; A's late close is refused by the fenced transaction and by the row's token
/// column. True when everything went as the story expects.
async fn month_end(fence: &Observed<PostgresFence>, account: &Domain) -> Result<bool, Error> {
    let clock = Timeline::start();
    let webhook = ReceiptWebhook::start(clock).await?;
    let accounts = RowFence::new(POSTGRES_SCHEMA, "accounts", "id", "fence_token")?;
    let kinds = EffectKinds::new().register("send-statement", DestinationRule::HttpUrl)?;
    let outbox = PostgresOutbox::new(fence.clone(), kinds);
    let leases: Arc<dyn LeaseManager> = Arc::new(fence.leases());
    println!("Fence on PostgreSQL: an account snapshot and its statement, under a lease");
    println!(
        "schema `{POSTGRES_SCHEMA}`; account `{account}`; statement webhook {}",
        webhook.url()
    );

    let a = leases
        .acquire(account, &OwnerId::new("worker-a")?, LEASE)
        .await?;
    clock.say(
        "A",
        format!("acquired the account lease ({LEASE:?}), token {}", a.token),
    );
    clock.say("A", "pauses (GC) before closing the month");

    // B's guard waits for A's lease to end (expiry by the server's clock), then keeps B's renewed.
    let options = LeaseOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
    let b =
        LeaseGuard::acquire(leases.clone(), account, &OwnerId::new("worker-b")?, options).await?;
    clock.say(
        "B",
        format!("acquired the account lease, token {}", b.token()),
    );
    let closed = close_month(&outbox, &accounts, account, b.token(), 120, &webhook.url()).await?;
    clock.say(
        "B",
        format!("balance 120 + statement recorded in one transaction: {closed}"),
    );

    let relay_config = RelayConfig::new("statements", OwnerId::new("relay-1")?)
        .lease_ttl(Duration::from_secs(4))
        .delivery_timeout(Duration::from_secs(1))
        .poll_interval(Duration::from_secs(2));
    let sink = Arc::new(WebhookSink::new()?.timeout(Duration::from_secs(1)));
    // Dropped if a signal interrupts the story, the handle stops the relay: it must not run on
    // during the cleanup.
    let relay = Relay::new(Arc::new(outbox.clone()), sink, leases.clone(), relay_config)?.spawn();
    clock.say(
        "R",
        "relay started: woken by NOTIFY, it delivers the statement",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    webhook.wait_for_first(Duration::from_secs(20)).await;

    clock.say(
        "A",
        "resumes, unaware its lease expired, and closes the month with balance 90",
    );
    let stale = close_month(&outbox, &accounts, account, a.token, 90, &webhook.url()).await;
    let fenced = matches!(&stale, Err(error) if error.is_fenced());
    match &stale {
        Ok(outcome) => clock.say("A", format!("committed?! {outcome}")),
        Err(error) => clock.say("A", format!("REJECTED before any of its SQL ran: {error}")),
    }
    // The per-row form alone (no mark table): the row's token column refuses it as well.
    let mut conn = fence.pool().acquire().await?;
    let direct = accounts
        .update(&mut conn, account.as_str().to_owned(), a.token, |set| {
            set.push("balance = ").push_bind(90_i64);
        })
        .await;
    let row_fenced = matches!(&direct, Err(error) if error.is_fenced());
    match &direct {
        Ok(()) => clock.say("A", "direct UPDATE applied?!"),
        Err(error) => clock.say(
            "A",
            format!(
                "direct UPDATE ... WHERE fence_token <= {}: {error}",
                a.token
            ),
        ),
    }

    let settled = settled_entries(deadline, || outbox.entries(account)).await?;
    let report = relay.shutdown().await?;
    let (sent, requests) = webhook.counts();
    let balance: i64 = sqlx::query_scalar(&format!(
        "SELECT balance FROM {POSTGRES_SCHEMA}.accounts WHERE id = $1"
    ))
    .bind(account.as_str())
    .fetch_one(fence.pool())
    .await?;
    clock.say(
        "R",
        format!("relay stopped: {} delivered", report.delivered),
    );
    println!(
        "account balance {balance}; statements recorded {}, sent {sent} ({requests} requests)",
        settled.len()
    );
    b.release().await?;
    let ok = fenced && row_fenced && balance == 120 && settled.len() == 1 && sent == 1;
    if ok {
        println!("the paused worker changed nothing: one balance, one statement");
    } else {
        println!(
            "UNEXPECTED: fenced={fenced}, row_fenced={row_fenced}, balance={balance}, \
             statements={}, sent={sent}",
            settled.len()
        );
    }
    Ok(ok)
}

#[tokio::main]
async fn main() -> ExitCode {
    run_example("postgres_account_worker", USAGE, async {
        fence_examples::no_arguments()?;
        story().await
    })
    .await
}
