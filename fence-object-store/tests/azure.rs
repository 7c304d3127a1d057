//! object_store's Azure Blob client against Azurite 3.35.0: the whole conformance suite, an
//! Azurite per scenario (so the restart scenario can restart it).
#![allow(clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use fence_testkit::azurite::AzuriteServer;
use support::{azure, fence, Harness};

const PREFIX: &str = "conformance/";

async fn azurite() -> Option<Harness> {
    let server = Arc::new(AzuriteServer::start("object-store-conformance")?);
    let endpoint = server.endpoint();
    let holder_endpoint = endpoint.clone();
    let restarted = server.clone();
    Some(Harness {
        fence: Mutex::new(fence(azure(&endpoint), PREFIX)),
        // A new client with an empty version cache: Azurite itself decides every stale token.
        holder: Box::new(move || fence(azure(&holder_endpoint), PREFIX)),
        restart: Some(Box::new(move || {
            let server = restarted.clone();
            Box::pin(async move {
                tokio::task::spawn_blocking({
                    let server = server.clone();
                    move || server.restart()
                })
                .await
                .expect("restart");
                fence(azure(&server.endpoint()), PREFIX)
            })
        })),
        not_applicable: &[],
        race_writers: 8,
        race_rounds: 30,
    })
}

fence_conformance::store_conformance!(azurite);

#[tokio::test]
async fn commit_pointer_and_retirement_on_azurite() {
    let Some(server) = AzuriteServer::start("object-store-pointer") else {
        return;
    };
    let fence = fence(azure(&server.endpoint()), "fence/");
    support::commit_pointer_and_retirement(&fence, "orders").await;
}
