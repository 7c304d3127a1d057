//! Test support for the PostgreSQL outbox: a migrated schema on the shared server, relays
//! leased from PostgreSQL, and a payment transition with a state change of the test's own.
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
pub use fence_conformance::webhook::WebhookServer;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, FencingToken, LeaseManager};
use fence_outbox::{
    Effect, IdempotencyKey, OutboxConfig, OutboxEntry, OutboxError, Relay, RelayConfig, Sink,
};
use fence_outbox_postgres::PostgresOutbox;
use fence_postgres::{Begun, FencedTransaction, PostgresFence, TransactionRequest};
use fence_testkit::postgres::{pool, shared_url, unique_schema, wait_for_sessions};

/// An outbox in a freshly migrated schema on the shared server, with an `orders(domain, status)`
/// table for the transitions' own state change.
pub async fn outbox(test: &str) -> Option<PostgresOutbox> {
    let url = shared_url()?;
    let pool = pool(&url).await;
    let schema = unique_schema(test);
    fence_postgres::migrate(&pool, &schema).await.unwrap();
    let fence = PostgresFence::builder(pool.clone(), &schema)
        .build()
        .unwrap();
    fence_outbox_postgres::migrate(&fence).await.unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {schema}.orders (domain text PRIMARY KEY, status text NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    Some(PostgresOutbox::new(fence, kinds()))
}

/// Marks the order paid and records one receipt effect to `url`, in one fenced transaction;
/// how many entries it recorded (0 when the op id had committed before).
pub async fn pay(
    outbox: &PostgresOutbox,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<usize, OutboxError> {
    pay_and_commit(&under(outbox), domain, token, op_id, url, payload).await
}

/// A relay of `outbox`'s partition 0, leased from the same database.
pub fn relay(outbox: &PostgresOutbox, sink: Arc<dyn Sink>, config: RelayConfig) -> Relay {
    under(outbox)
        .relay(sink, config)
        .expect("valid relay config")
}

/// Waits until `check` holds on the entries of `domains`, or fails after `limit`.
pub async fn wait_for(
    outbox: &PostgresOutbox,
    domains: &[Domain],
    limit: Duration,
    check: impl Fn(&[OutboxEntry]) -> bool,
) -> Vec<OutboxEntry> {
    fence_conformance::relay::wait_for(&under(outbox), domains, limit, check).await
}

/// The outbox as the relay contracts drive it.
pub struct PostgresUnderTest {
    pub outbox: PostgresOutbox,
}

fn under(outbox: &PostgresOutbox) -> PostgresUnderTest {
    PostgresUnderTest {
        outbox: outbox.clone(),
    }
}

/// A fresh outbox on the shared server.
pub async fn under_test(test: &str) -> Option<PostgresUnderTest> {
    Some(PostgresUnderTest {
        outbox: outbox(test).await?,
    })
}

fence_conformance::sql_outbox_under_test!(PostgresUnderTest, expire_relay_lease);

#[async_trait::async_trait]
impl SqlOutboxUnderTest for PostgresUnderTest {
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
            "INSERT INTO {}.orders (domain, status) VALUES ($1, $2)
                 ON CONFLICT (domain) DO UPDATE SET status = excluded.status",
            self.outbox.fence().schema()
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
impl BoundedSteps for PostgresUnderTest {
    fn with_step_timeout(&self, timeout: Duration) -> Self {
        under(&self.outbox.clone().with_step_timeout(timeout))
    }

    async fn through_proxy(&self, timeout: Duration) -> (Self, TcpProxy) {
        let url = shared_url().unwrap();
        let upstream = fence_testkit::postgres::address(&url);
        let proxy = TcpProxy::start(upstream.parse().unwrap()).await.unwrap();
        let proxied = url.replace(&upstream, &proxy.address().to_string());
        let fence = PostgresFence::builder(pool(&proxied).await, self.outbox.fence().schema())
            .build()
            .unwrap();
        let outbox = PostgresOutbox::new(fence, kinds()).with_step_timeout(timeout);
        (under(&outbox), proxy)
    }

    async fn hold_first_entry(&self, domain: &Domain) -> Box<dyn Send> {
        let mut tx = self.outbox.fence().pool().begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT 1 FROM {} WHERE domain = $1 AND seq = 1 FOR UPDATE",
            self.entries_table()
        ))
        .bind(domain.as_str())
        .execute(&mut *tx)
        .await
        .unwrap();
        Box::new(tx)
    }

    async fn step_waiting(&self) -> String {
        let waiting = "wait_event_type = 'Lock' AND position($1 in query) > 0";
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
        let pid: i32 =
            sqlx::query_scalar(&format!("SELECT pid FROM pg_stat_activity WHERE {waiting}"))
                .bind(&table)
                .fetch_one(pool)
                .await
                .unwrap();
        pid.to_string()
    }

    async fn step_idle(&self, id: &str) {
        let pool = self.outbox.fence().pool();
        let idle = "state = 'idle in transaction' AND pid = $1::int";
        wait_for_sessions(
            pool,
            idle,
            id,
            1,
            "the frozen relay's step idle in transaction",
        )
        .await;
    }

    async fn session_alive(&self, id: &str) -> bool {
        let alive: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int")
                .bind(id)
                .fetch_one(self.outbox.fence().pool())
                .await
                .unwrap();
        alive > 0
    }
}

impl PostgresUnderTest {
    fn entries_table(&self) -> String {
        format!("{}.fence_outbox_entries", self.outbox.fence().schema())
    }
}

/// Ends the test relay group's partition-0 lease now, as its TTL would (by the server's clock).
pub async fn expire_relay_lease(outbox: &PostgresOutbox) {
    let lease_domain = fast_relay("x").lease_domain().unwrap();
    let expired = sqlx::query(&format!(
        "UPDATE {}.fence_leases SET expires = clock_timestamp() - interval '1 second'
         WHERE domain = $1",
        outbox.fence().schema()
    ))
    .bind(lease_domain.as_str())
    .execute(outbox.fence().pool())
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(expired, 1, "the relay lease existed");
}

/// Waits until `count` sessions LISTEN on the outbox's channel (its name holds the outbox's
/// unique schema): the idle relays are listening, so a notification can only wake them.
#[allow(dead_code)] // each test binary uses its own part of this module
pub async fn wait_until_listening(outbox: &PostgresOutbox, count: i64) {
    let fence = outbox.fence();
    fence_testkit::postgres::wait_for_sessions(
        fence.pool(),
        "query ILIKE 'LISTEN %' AND position($1 in query) > 0",
        fence.schema(),
        count,
        "relays listening on the outbox's channel",
    )
    .await;
}
