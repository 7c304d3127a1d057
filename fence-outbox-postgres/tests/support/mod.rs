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

pub use fence_conformance::relay_kit::*;
pub use fence_conformance::services::{domain, token};
pub use fence_conformance::webhook::WebhookServer;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, FencingToken, LeaseManager};
use fence_outbox::{
    Effect, IdempotencyKey, OutboxConfig, OutboxEntry, OutboxError, Relay, RelayConfig, Sink,
};
use fence_outbox_postgres::PostgresOutbox;
use fence_postgres::{Begun, PostgresFence, TransactionRequest};
use fence_testkit::postgres::{pool, shared_url, unique_schema};

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
/// the keys recorded (none when the op id had committed before).
pub async fn pay(
    outbox: &PostgresOutbox,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<Vec<IdempotencyKey>, OutboxError> {
    let request = TransactionRequest::new(domain.clone(), token).with_op_id(op(op_id));
    let Begun::Admitted(mut tx) = outbox.fence().begin(&request).await? else {
        return Ok(Vec::new());
    };
    sqlx::query(&format!(
        "INSERT INTO {}.orders (domain, status) VALUES ($1, $2)
         ON CONFLICT (domain) DO UPDATE SET status = excluded.status",
        outbox.fence().schema()
    ))
    .bind(domain.as_str())
    .bind(format!("paid by {token}"))
    .execute(&mut *tx)
    .await
    .unwrap();
    let effect = Effect::new("send-receipt-email", url, payload.to_owned());
    let keys = outbox.record(&mut tx, &[effect]).await?;
    tx.commit().await?;
    Ok(keys)
}

/// A relay of `outbox`'s partition 0, leased from the same PostgreSQL.
pub fn relay(outbox: &PostgresOutbox, sink: Arc<dyn Sink>, config: RelayConfig) -> Relay {
    relay_result(outbox, sink, config).expect("valid relay config")
}

pub fn relay_result(
    outbox: &PostgresOutbox,
    sink: Arc<dyn Sink>,
    config: RelayConfig,
) -> Result<Relay, OutboxError> {
    let leases: Arc<dyn LeaseManager> = Arc::new(outbox.fence().leases());
    Relay::new(Arc::new(outbox.clone()), sink, leases, config)
}

/// Waits until `check` holds on the entries of `domains`, or fails after `limit`.
pub async fn wait_for(
    outbox: &PostgresOutbox,
    domains: &[Domain],
    limit: Duration,
    check: impl Fn(&[OutboxEntry]) -> bool,
) -> Vec<OutboxEntry> {
    let o = PostgresUnderTest {
        outbox: outbox.clone(),
    };
    fence_conformance::relay::wait_for(&o, domains, limit, check).await
}

/// The PostgreSQL outbox as fence-testkit's relay contract drives it.
pub struct PostgresUnderTest {
    pub outbox: PostgresOutbox,
}

/// A fresh outbox on the shared server.
pub async fn under_test(test: &str) -> Option<PostgresUnderTest> {
    Some(PostgresUnderTest {
        outbox: outbox(test).await?,
    })
}

#[async_trait::async_trait]
impl fence_conformance::relay::OutboxUnderTest for PostgresUnderTest {
    async fn pay(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &str,
        url: &str,
        payload: &str,
    ) -> Result<usize, OutboxError> {
        Ok(pay(&self.outbox, domain, token, op_id, url, payload)
            .await?
            .len())
    }

    async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.outbox.entries(domain).await
    }

    async fn dead_letters(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.outbox.dead_letters(domain).await
    }

    async fn discard_dead_letter(&self, domain: &Domain, seq: u64) -> Result<bool, OutboxError> {
        self.outbox.discard_dead_letter(domain, seq).await
    }

    fn relay(&self, sink: Arc<dyn Sink>, config: RelayConfig) -> Result<Relay, OutboxError> {
        relay_result(&self.outbox, sink, config)
    }

    fn store(&self) -> Result<Arc<dyn fence_outbox::OutboxStore>, OutboxError> {
        Ok(Arc::new(self.outbox.clone()))
    }

    async fn expire_relay_lease(&self) {
        expire_relay_lease(&self.outbox).await;
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
