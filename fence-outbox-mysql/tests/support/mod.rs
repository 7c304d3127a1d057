//! Test support for the MySQL outbox: a migrated database on the shared MariaDB, relays leased
//! from it, and a payment transition with a state change of the test's own.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    // Each test binary uses its own part of this module.
    unused_imports
)]

pub use fence_conformance::proxy::TcpProxy;
pub use fence_conformance::relay::OutboxUnderTest;
pub use fence_conformance::relay_kit::*;
pub use fence_conformance::services::{domain, token};
pub use fence_conformance::sql_relay::{
    pay_and_commit, Admitted, BoundedSteps, OpenTransition, SqlOutboxUnderTest,
};

use std::time::Duration;

use fence_core::{Domain, FencingToken};
use fence_mysql::{Begun, MySqlFence, TransactionRequest};
use fence_outbox::{Effect, OutboxError};
use fence_outbox_mysql::MySqlOutbox;
use fence_testkit::mysql::{pool, shared_url, unique_database, wait_for_sessions};

/// An outbox in a freshly migrated database on the shared server, with an
/// `orders(domain, status)` table for the transitions' own state change.
pub async fn outbox(test: &str) -> Option<MySqlOutbox> {
    let url = shared_url()?;
    Some(outbox_at(&url, &unique_database(test)).await)
}

/// An outbox on `database` (migrated here, idempotently) at the server of `url`.
pub async fn outbox_at(url: &str, database: &str) -> MySqlOutbox {
    let pool = pool(url).await;
    fence_mysql::migrate(&pool, database).await.unwrap();
    let fence = MySqlFence::builder(pool.clone(), database).build().unwrap();
    fence_outbox_mysql::migrate(&fence).await.unwrap();
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {database}.orders
             (domain VARBINARY(256) PRIMARY KEY, status VARCHAR(64) NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    MySqlOutbox::new(fence, kinds())
}

/// Marks the order paid and records one receipt effect to `url`, in one fenced transaction;
/// how many entries it recorded (0 when the op id had committed before).
pub async fn pay(
    outbox: &MySqlOutbox,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<usize, OutboxError> {
    pay_and_commit(&under(outbox), domain, token, op_id, url, payload).await
}

/// The outbox as the relay contracts drive it.
pub struct MySqlUnderTest {
    pub outbox: MySqlOutbox,
}

fn under(outbox: &MySqlOutbox) -> MySqlUnderTest {
    MySqlUnderTest {
        outbox: outbox.clone(),
    }
}

/// A fresh outbox on the shared server.
pub async fn under_test(test: &str) -> Option<MySqlUnderTest> {
    Some(MySqlUnderTest {
        outbox: outbox(test).await?,
    })
}

fence_conformance::sql_outbox_under_test!(MySqlUnderTest, expire_relay_lease);

#[async_trait::async_trait]
impl SqlOutboxUnderTest for MySqlUnderTest {
    async fn open(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: Option<&str>,
        url: &str,
        payload: &str,
    ) -> Result<Option<Box<dyn OpenTransition>>, OutboxError> {
        let mut request = TransactionRequest::new(domain.clone(), token);
        if let Some(op_id) = op_id {
            request = request.with_op_id(op(op_id));
        }
        let Begun::Admitted(mut tx) = self.outbox.fence().begin(&request).await? else {
            return Ok(None);
        };
        sqlx::query(&format!(
            "INSERT INTO {}.orders (domain, status) VALUES (?, ?)
                 ON DUPLICATE KEY UPDATE status = VALUES(status)",
            self.outbox.fence().database()
        ))
        .bind(domain.as_str())
        .bind(format!("paid by {token}"))
        .execute(&mut *tx)
        .await
        .unwrap();
        let effect = Effect::new("send-receipt-email", url, payload.to_owned());
        self.outbox.record(&mut tx, &[effect]).await?;
        Ok(Some(Box::new(Admitted(tx))))
    }
}

#[async_trait::async_trait]
impl BoundedSteps for MySqlUnderTest {
    fn with_step_timeout(&self, timeout: Duration) -> Self {
        under(&self.outbox.clone().with_step_timeout(timeout))
    }

    async fn through_proxy(&self, timeout: Duration) -> (Self, TcpProxy) {
        let url = shared_url().unwrap();
        let upstream = fence_testkit::mysql::address(&url);
        let proxy = TcpProxy::start(upstream.parse().unwrap()).await.unwrap();
        let proxied = url.replace(&upstream, &proxy.address().to_string());
        let fence = MySqlFence::builder(pool(&proxied).await, self.outbox.fence().database())
            .build()
            .unwrap();
        let outbox = MySqlOutbox::new(fence, kinds()).with_step_timeout(timeout);
        (under(&outbox), proxy)
    }

    async fn hold_first_entry(&self, domain: &Domain) -> Box<dyn Send> {
        let mut tx = self.outbox.fence().pool().begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT 1 FROM {} WHERE domain = ? AND seq = 1 FOR UPDATE",
            self.entries_table()
        ))
        .bind(domain.as_str())
        .execute(&mut *tx)
        .await
        .unwrap();
        Box::new(tx)
    }

    async fn step_waiting(&self) -> String {
        // MariaDB lists a statement waiting for a row lock as `Updating`.
        let waiting = "COMMAND = 'Execute' AND STATE = 'Updating' AND LOCATE(?, INFO) > 0";
        let pool = self.outbox.fence().pool();
        let table = self.entries_table();
        wait_for_sessions(
            pool,
            waiting,
            &table,
            1,
            "a relay step waiting on the held entry",
        )
        .await;
        // Signed on MariaDB, unsigned on MySQL 8: one type for both.
        let id: i64 = sqlx::query_scalar(&format!(
            "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE {waiting}"
        ))
        .bind(&table)
        .fetch_one(pool)
        .await
        .unwrap();
        id.to_string()
    }

    async fn step_idle(&self, id: &str) {
        let pool = self.outbox.fence().pool();
        let idle = "COMMAND = 'Sleep' AND ID = ?";
        wait_for_sessions(pool, idle, id, 1, "the frozen relay's step idle").await;
    }

    async fn session_alive(&self, id: &str) -> bool {
        let alive: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?")
                .bind(id)
                .fetch_one(self.outbox.fence().pool())
                .await
                .unwrap();
        alive > 0
    }
}

impl MySqlUnderTest {
    fn entries_table(&self) -> String {
        format!("{}.fence_outbox_entries", self.outbox.fence().database())
    }
}

/// Ends the test relay group's partition-0 lease now, as its TTL would (by the server's clock).
pub async fn expire_relay_lease(outbox: &MySqlOutbox) {
    let lease_domain = fast_relay("x").lease_domain().unwrap();
    let expired = sqlx::query(&format!(
        "UPDATE {}.fence_leases SET expires = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND
         WHERE domain = ?",
        outbox.fence().database()
    ))
    .bind(lease_domain.as_str())
    .execute(outbox.fence().pool())
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(expired, 1, "the relay lease existed");
}
