//! The conformance suite against real MariaDB servers, one per scenario (so the restart
//! scenario can kill -9 its own server).
#![allow(clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_mysql::MySqlFence;
use fence_testkit::mysql::{pool, MariaDbServer};

const DATABASE: &str = "fence";

async fn fence(url: &str) -> Observed<MySqlFence> {
    let pool = pool(url).await;
    fence_mysql::migrate(&pool, DATABASE)
        .await
        .expect("migrate");
    MySqlFence::builder(pool, DATABASE)
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid database")
}

struct Dedicated {
    server: MariaDbServer,
    fence: Mutex<Observed<MySqlFence>>,
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
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .acquire_timeout(std::time::Duration::from_secs(2))
            .connect_lazy("mysql://fence:fence@127.0.0.1:1/fence")
            .expect("a valid URL");
        Some(Arc::new(
            MySqlFence::builder(pool, DATABASE)
                .max_value_bytes(64 * 1024)
                .build()
                .expect("valid database"),
        ))
    }

    /// Updates the domain's mark row, going around Fence: the mark to 0 (no token), or the
    /// entry's kind to one Fence never writes.
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let set = match part {
            StatePart::Mark => "hwm = 0",
            StatePart::Entry => "state = 'x'",
            _ => return Ok(false),
        };
        let pool = self.fence.lock().expect("lock").pool().clone();
        let updated = sqlx::query(&format!(
            "UPDATE {DATABASE}.fence_marks SET {set} WHERE domain = ?"
        ))
        .bind(domain.as_str().as_bytes())
        .execute(&pool)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(format!("no mark row for `{domain}`").into());
        }
        Ok(true)
    }
}

async fn dedicated() -> Option<Dedicated> {
    let server = MariaDbServer::start("conformance")?;
    let fence = Mutex::new(fence(&server.url()).await);
    Some(Dedicated { server, fence })
}

fence_conformance::store_conformance!(dedicated);

#[tokio::test]
async fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention};
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .connect_lazy("mysql://fence:fence@127.0.0.1:1/fence")
        .expect("a valid URL");
    let caps = MySqlFence::builder(pool, DATABASE)
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid database")
        .capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(
                fence_mysql::DEFAULT_OP_ID_RETENTION
            ))
            .with_max_value_bytes(Some(64 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}
