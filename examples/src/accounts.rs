//! The seeds' own example on a SQL database, one story for every SQL backend: an account
//! snapshot updated under a lease, in one database transaction with its fencing token, and a
//! "send statement" effect recorded in the same transaction and delivered once. A worker that
//! paused past its lease wakes up and tries the same: its transaction is refused before any of
//! its SQL runs, and the row's own token column refuses its direct `UPDATE` too. Each
//! backend's example says how its database does each step ([`Accounts`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use fence_core::{
    Domain, FenceError, FencingToken, LeaseGuard, LeaseManager, LeaseOptions, OwnerId,
};
use fence_outbox::{OutboxEntry, OutboxError, OutboxStore, Relay, RelayConfig, WebhookSink};

use crate::{
    after_cleanup, settled_entries, until_shutdown, ExampleError, ReceiptWebhook, Timeline,
};

/// How long a worker's lease lasts: the paused worker outlives it.
const LEASE: Duration = Duration::from_millis(300);

/// One SQL backend's steps of the account story.
#[async_trait]
pub trait Accounts: Send + Sync {
    /// The database, for people (`PostgreSQL`).
    fn database(&self) -> &'static str;

    /// Where the tables live, for people (`schema fence_demo`).
    fn place(&self) -> String;

    /// How an idle relay learns of a recorded effect, for people.
    fn relay_wakes(&self) -> &'static str;

    /// Creates the accounts table if missing and opens `account` with a balance of 100.
    async fn open(&self, account: &Domain) -> Result<(), ExampleError>;

    /// Under `token`, in one fenced transaction: sets the account's balance (the row's own
    /// token column checks the token too) and records the "send statement" effect to
    /// `statement_url`; what was recorded.
    async fn close_month(
        &self,
        account: &Domain,
        token: FencingToken,
        balance: i64,
        statement_url: &str,
    ) -> Result<String, OutboxError>;

    /// The per-row form alone (no mark table): `UPDATE … WHERE` the row's token column admits
    /// `token`.
    async fn update_row(
        &self,
        account: &Domain,
        token: FencingToken,
        balance: i64,
    ) -> Result<(), FenceError>;

    /// The account's balance.
    async fn balance(&self, account: &Domain) -> Result<i64, ExampleError>;

    /// The account's outbox entries.
    async fn entries(&self, account: &Domain) -> Result<Vec<OutboxEntry>, OutboxError>;

    /// The outbox, as its relay works on it.
    fn store(&self) -> Arc<dyn OutboxStore>;

    /// The database's own leases.
    fn leases(&self) -> Arc<dyn LeaseManager>;

    /// Removes the run's rows (the account's, its outbox entries) and retires its domain.
    async fn clean_up(&self, account: &Domain) -> Result<(), ExampleError>;
}

/// Runs the story on `accounts` for a fresh account, and cleans up after success, an error or
/// ctrl-c/SIGTERM alike; true when everything went as the story expects.
pub async fn account_worker(accounts: &dyn Accounts) -> Result<bool, ExampleError> {
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let account = Domain::new(format!("account-7-run-{run}"))?;
    accounts.open(&account).await?;
    let outcome = until_shutdown(month_end(accounts, &account)).await;
    let cleanup = accounts.clean_up(&account).await;
    after_cleanup(outcome, cleanup)
}

/// Worker A pauses past its lease, worker B closes the month and the relay delivers the
/// statement; A's late close is refused by the fenced transaction and by the row's token
/// column.
async fn month_end(accounts: &dyn Accounts, account: &Domain) -> Result<bool, ExampleError> {
    let clock = Timeline::start();
    let webhook = ReceiptWebhook::start(clock).await?;
    let leases = accounts.leases();
    println!(
        "Fence on {}: an account snapshot and its statement, under a lease",
        accounts.database()
    );
    println!(
        "{}; account `{account}`; statement webhook {}",
        accounts.place(),
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
    let closed = accounts
        .close_month(account, b.token(), 120, &webhook.url())
        .await?;
    clock.say(
        "B",
        format!("balance 120 + statement recorded in one transaction: {closed}"),
    );

    let relay_config = RelayConfig::new("statements", OwnerId::new("relay-1")?)
        .lease_ttl(Duration::from_secs(4))
        .delivery_timeout(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(500));
    let sink = Arc::new(WebhookSink::new()?.timeout(Duration::from_secs(1)));
    // Dropped if a signal interrupts the story, the handle stops the relay: it must not run on
    // during the cleanup.
    let relay = Relay::new(accounts.store(), sink, leases.clone(), relay_config)?.spawn();
    clock.say(
        "R",
        format!(
            "relay started: {}, it delivers the statement",
            accounts.relay_wakes()
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    webhook.wait_for_first(Duration::from_secs(20)).await;

    clock.say(
        "A",
        "resumes, unaware its lease expired, and closes the month with balance 90",
    );
    let stale = accounts
        .close_month(account, a.token, 90, &webhook.url())
        .await;
    let fenced = matches!(&stale, Err(error) if error.is_fenced());
    match &stale {
        Ok(outcome) => clock.say("A", format!("committed?! {outcome}")),
        Err(error) => clock.say("A", format!("REJECTED before any of its SQL ran: {error}")),
    }
    let direct = accounts.update_row(account, a.token, 90).await;
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

    let settled = settled_entries(deadline, || accounts.entries(account)).await?;
    let report = relay.shutdown().await?;
    let (sent, requests) = webhook.counts();
    let balance = accounts.balance(account).await?;
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
