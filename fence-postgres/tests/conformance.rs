//! The conformance suite against real PostgreSQL servers, one per scenario (so the restart
//! scenario can kill -9 its own server).
#![allow(clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_postgres::PostgresFence;
use fence_testkit::postgres::{pool, PostgresServer};

const SCHEMA: &str = "fence";

async fn fence(url: &str) -> Observed<PostgresFence> {
    let pool = pool(url).await;
    fence_postgres::migrate(&pool, SCHEMA)
        .await
        .expect("migrate");
    PostgresFence::builder(pool, SCHEMA)
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid schema")
}

struct Dedicated {
    server: PostgresServer,
    fence: Mutex<Observed<PostgresFence>>,
}

#[async_trait]
impl StoreHarness for Dedicated {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.fence.lock().expect("lock").clone())
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        self.server.kill_and_restart();
        let fresh = fence(&self.server.url()).await;
        *self.fence.lock().expect("lock") = fresh;
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(std::time::Duration::from_secs(2))
            .connect_lazy("postgres://fence@127.0.0.1:1/postgres")
            .expect("a valid URL");
        Some(Arc::new(
            PostgresFence::builder(pool, SCHEMA)
                .max_value_bytes(64 * 1024)
                .build()
                .expect("valid schema"),
        ))
    }

    /// Updates the domain's mark row, going around Fence (the columns' constraints allow it):
    /// the mark to NULL, or the entry's kind to one Fence never writes.
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let set = match part {
            StatePart::Mark => "hwm = NULL",
            StatePart::Entry => "state = 'x'",
            _ => return Ok(false),
        };
        let pool = self.fence.lock().expect("lock").pool().clone();
        let updated = sqlx::query(&format!(
            "UPDATE {SCHEMA}.fence_marks SET {set} WHERE domain = $1"
        ))
        .bind(domain.as_str())
        .execute(&pool)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(format!("no mark row for `{domain}`").into());
        }
        Ok(true)
    }
}

async fn dedicated() -> Option<Dedicated> {
    let server = PostgresServer::start("conformance")?;
    let fence = Mutex::new(fence(&server.url()).await);
    Some(Dedicated { server, fence })
}

fence_conformance::store_conformance!(dedicated);

#[tokio::test]
async fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention};
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://fence@127.0.0.1:1/postgres")
        .expect("a valid URL");
    let caps = PostgresFence::builder(pool, SCHEMA)
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid schema")
        .capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(
                fence_postgres::DEFAULT_OP_ID_RETENTION
            ))
            .with_max_value_bytes(Some(64 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}
