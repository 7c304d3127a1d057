//! The whole conformance suite against SeaweedFS: a dedicated `weed mini` per scenario, so the
//! restart scenario can SIGKILL and restart it without disturbing other tests.
#![allow(clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::StoreHarness;
use fence_core::{BoxError, FencedStore};
use fence_s3::S3Fence;
use support::WeedServer;

fn fence(endpoint: &str) -> S3Fence {
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
    fence: Mutex<S3Fence>,
}

#[async_trait]
impl StoreHarness for Seaweed {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.fence.lock().expect("lock").clone())
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        self.server.kill_and_restart().await;
        *self.fence.lock().expect("lock") = fence(&self.server.endpoint());
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(fence("http://127.0.0.1:1")))
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
    let fence = Mutex::new(fence(&server.endpoint()));
    Some(Seaweed { server, fence })
}

fence_conformance::store_conformance!(seaweed);
