//! The whole conformance suite against SeaweedFS: a dedicated `weed mini` per scenario, so the
//! restart scenario can SIGKILL and restart it without disturbing other tests.
#![allow(clippy::expect_used)]

use fence_testkit::s3 as support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_s3::S3Fence;
use support::WeedServer;

fn fence(endpoint: &str) -> Observed<S3Fence> {
    S3Fence::builder()
        .client(support::client(endpoint))
        .bucket(support::BUCKET)
        .prefix("conformance/")
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid configuration")
}

struct Seaweed {
    server: WeedServer,
    store: Mutex<Observed<S3Fence>>,
}

#[async_trait]
impl StoreHarness for Seaweed {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.store.lock().expect("lock").clone())
    }

    // A new client with an empty ETag cache: S3 itself decides every stale token it presents.
    fn holder(&self) -> Arc<dyn FencedStore> {
        Arc::new(fence(&self.server.endpoint()))
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        self.server.kill_and_restart().await;
        *self.store.lock().expect("lock") = fence(&self.server.endpoint());
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(fence("http://127.0.0.1:1")))
    }

    /// Damages one line of the domain's object's envelope, going around Fence.
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let key = self.store.lock().expect("lock").object_key(domain)?;
        let client = support::client(&self.server.endpoint());
        let object = support::raw_get(&client, &key).await;
        let Some(damaged) = fence_testkit::envelope::damage(&object, part)? else {
            return Ok(false);
        };
        support::raw_put(&client, &key, damaged).await;
        Ok(true)
    }

    // SeaweedFS makes losers of a contended conditional write wait in ~1 s steps.
    fn race_writers(&self) -> usize {
        4
    }

    fn race_rounds(&self) -> usize {
        6
    }
}

async fn seaweed() -> Option<Seaweed> {
    let server = WeedServer::start("conformance").await?;
    let store = Mutex::new(fence(&server.endpoint()));
    Some(Seaweed { server, store })
}

fence_conformance::store_conformance!(seaweed);

#[test]
fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention};
    let fence = fence("http://127.0.0.1:1");
    assert_eq!(
        fence.capabilities(),
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::PerDomain(16))
            .with_max_value_bytes(Some(64 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    let caps = fence.capabilities();
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}
