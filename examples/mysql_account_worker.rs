//! The seeds' own example on MySQL and MariaDB: an account snapshot updated under a lease, in one
//! database transaction with its fencing token, and a "send statement" effect recorded in the
//! same transaction and delivered once. A worker that paused past its lease wakes up and tries
//! the same: its transaction is refused before any of its SQL runs, and the row's own token
//! column refuses its direct `UPDATE` too. The story is `fence_examples::account_worker`, shared
//! with the PostgreSQL twin; this file is how MySQL does each step.
//!
//! `cargo run --features servers --example mysql_account_worker`
//! (MySQL or MariaDB at `FENCE_MYSQL_URL`, else the project's MariaDB: `scripts/services up`). The run's
//! rows are removed at the end, after success, an error or ctrl-c/SIGTERM alike.

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use fence_core::{
    BackendErrorKind, Domain, FenceError, FencingToken, LeaseManager, Observed, OperationId,
};
use fence_examples::{account_worker, mysql_fence, run_example, Accounts, MYSQL_DATABASE};
use fence_mysql::{Begun, MySqlFence, RowFence, TransactionRequest};
use fence_outbox::{DestinationRule, Effect, EffectKinds, OutboxEntry, OutboxError, OutboxStore};
use fence_outbox_mysql::MySqlOutbox;

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
mysql_account_worker: an account snapshot updated under a lease in one database
transaction with its fencing token, and a \"send statement\" effect recorded in the same
transaction and delivered once; a worker that paused past its lease is refused before any of
its SQL runs, and the row's token column refuses its direct UPDATE too.

Usage: cargo run --features servers --example mysql_account_worker";

/// The accounts table and the outbox, beside the fence's tables in [`MYSQL_DATABASE`].
struct MySql {
    fence: Observed<MySqlFence>,
    outbox: MySqlOutbox,
    accounts: RowFence,
}

#[async_trait]
impl Accounts for MySql {
    fn database(&self) -> &'static str {
        "MySQL (MariaDB)"
    }

    fn place(&self) -> String {
        format!("database `{MYSQL_DATABASE}`")
    }

    fn relay_wakes(&self) -> &'static str {
        "polling (MySQL has no NOTIFY)"
    }

    async fn open(&self, account: &Domain) -> Result<(), Error> {
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {MYSQL_DATABASE}.accounts \
             (id VARCHAR(255) PRIMARY KEY, balance BIGINT NOT NULL, fence_token BIGINT UNSIGNED)"
        ))
        .execute(self.fence.pool())
        .await?;
        sqlx::query(&format!(
            "INSERT INTO {MYSQL_DATABASE}.accounts (id, balance) VALUES (?, 100)"
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
            FenceError::backend("mysql", BackendErrorKind::Unavailable, Some(account), e)
        })?;
        self.accounts
            .update(&mut conn, account.as_str().to_owned(), token, |set| {
                set.push("balance = ").push_bind(balance);
            })
            .await
    }

    async fn balance(&self, account: &Domain) -> Result<i64, Error> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT balance FROM {MYSQL_DATABASE}.accounts WHERE id = ?"
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
        fence_examples::retire_mysql_run(&self.fence, "accounts", account).await
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
    run_example("mysql_account_worker", USAGE, async {
        fence_examples::no_arguments()?;
        let fence = mysql_fence().await?;
        fence_outbox_mysql::migrate(&fence).await?;
        let kinds = EffectKinds::new().register("send-statement", DestinationRule::HttpUrl)?;
        let mysql = MySql {
            outbox: MySqlOutbox::new(fence.clone(), kinds),
            accounts: RowFence::new(MYSQL_DATABASE, "accounts", "id", "fence_token")?,
            fence,
        };
        account_worker(&mysql).await
    })
    .await
}
