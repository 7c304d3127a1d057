//! The seeds' own example on PostgreSQL: an account snapshot updated under a lease, in one
//! database transaction with its fencing token, and a "send statement" effect recorded in the
//! same transaction and delivered once. A worker that paused past its lease wakes up and tries
//! the same: its transaction is refused before any of its SQL runs, and the row's own token
//! column refuses its direct `UPDATE` too. The story is `fence_examples::account_worker`, shared
//! with the MySQL twin; this file is how PostgreSQL does each step.
//!
//! `cargo run --features servers --example postgres_account_worker`
//! (PostgreSQL at `FENCE_POSTGRES_URL`, else the project's: `scripts/services up`). The run's
//! rows are removed at the end, after success, an error or ctrl-c/SIGTERM alike.

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use fence_core::{
    BackendErrorKind, Domain, FenceError, FencingToken, LeaseManager, Observed, OperationId,
};
use fence_examples::{account_worker, postgres_fence, run_example, Accounts, POSTGRES_SCHEMA};
use fence_outbox::{DestinationRule, Effect, EffectKinds, OutboxEntry, OutboxError, OutboxStore};
use fence_outbox_postgres::PostgresOutbox;
use fence_postgres::{Begun, PostgresFence, RowFence, TransactionRequest};

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
postgres_account_worker: an account snapshot updated under a lease in one database
transaction with its fencing token, and a \"send statement\" effect recorded in the same
transaction and delivered once; a worker that paused past its lease is refused before any of
its SQL runs, and the row's token column refuses its direct UPDATE too.

Usage: cargo run --features servers --example postgres_account_worker";

/// The accounts table and the outbox, beside the fence's tables in [`POSTGRES_SCHEMA`].
struct Postgres {
    fence: Observed<PostgresFence>,
    outbox: PostgresOutbox,
    accounts: RowFence,
}

#[async_trait]
impl Accounts for Postgres {
    fn database(&self) -> &'static str {
        "PostgreSQL"
    }

    fn place(&self) -> String {
        format!("schema `{POSTGRES_SCHEMA}`")
    }

    fn relay_wakes(&self) -> &'static str {
        "woken by NOTIFY"
    }

    async fn open(&self, account: &Domain) -> Result<(), Error> {
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA}.accounts \
             (id text PRIMARY KEY, balance bigint NOT NULL, fence_token numeric(20,0))"
        ))
        .execute(self.fence.pool())
        .await?;
        sqlx::query(&format!(
            "INSERT INTO {POSTGRES_SCHEMA}.accounts (id, balance) VALUES ($1, 100)"
        ))
        .bind(account.as_str())
        .execute(self.fence.pool())
        .await?;
        Ok(())
    }

    async fn close_month(
        &self,
        account: &Domain,
        token: FencingToken,
        balance: i64,
        statement_url: &str,
    ) -> Result<String, OutboxError> {
        let request = TransactionRequest::new(account.clone(), token)
            .with_op_id(OperationId::new(format!("close-month-{token}"))?);
        // A stale token is refused here, before any of the transaction's SQL runs.
        let Begun::Admitted(mut tx) = self.fence.begin(&request).await? else {
            return Ok("done before".into());
        };
        self.accounts
            .update(&mut tx, account.as_str().to_owned(), token, |set| {
                set.push("balance = ").push_bind(balance);
            })
            .await?;
        let keys = self
            .outbox
            .record(&mut tx, &[statement(account, balance, statement_url)])
            .await?;
        tx.commit().await?;
        Ok(format!("statement key {}", keys[0]))
    }

    async fn update_row(
        &self,
        account: &Domain,
        token: FencingToken,
        balance: i64,
    ) -> Result<(), FenceError> {
        let mut conn = self.fence.pool().acquire().await.map_err(|e| {
            FenceError::backend("postgres", BackendErrorKind::Unavailable, Some(account), e)
        })?;
        self.accounts
            .update(&mut conn, account.as_str().to_owned(), token, |set| {
                set.push("balance = ").push_bind(balance);
            })
            .await
    }

    async fn balance(&self, account: &Domain) -> Result<i64, Error> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT balance FROM {POSTGRES_SCHEMA}.accounts WHERE id = $1"
        ))
        .bind(account.as_str())
        .fetch_one(self.fence.pool())
        .await?)
    }

    async fn entries(&self, account: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.outbox.entries(account).await
    }

    fn store(&self) -> Arc<dyn OutboxStore> {
        Arc::new(self.outbox.clone())
    }

    fn leases(&self) -> Arc<dyn LeaseManager> {
        Arc::new(self.fence.leases())
    }

    async fn clean_up(&self, account: &Domain) -> Result<(), Error> {
        fence_examples::retire_postgres_run(&self.fence, "accounts", account).await
    }
}

/// The "send statement" effect of `account` at `balance`.
fn statement(account: &Domain, balance: i64, url: &str) -> Effect {
    Effect::new(
        "send-statement",
        url,
        format!("{{\"account\":\"{account}\",\"balance\":{balance}}}"),
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    run_example("postgres_account_worker", USAGE, async {
        fence_examples::no_arguments()?;
        let fence = postgres_fence().await?;
        fence_outbox_postgres::migrate(&fence).await?;
        let kinds = EffectKinds::new().register("send-statement", DestinationRule::HttpUrl)?;
        let postgres = Postgres {
            outbox: PostgresOutbox::new(fence.clone(), kinds),
            accounts: RowFence::new(POSTGRES_SCHEMA, "accounts", "id", "fence_token")?,
            fence,
        };
        account_worker(&postgres).await
    })
    .await
}
