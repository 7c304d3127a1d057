//! The whole conformance suite on object_store's `InMemory`, the crate's embedded default: one
//! store per scenario, shared by the fence and another holder's fence (each with its own cache).

mod support;

use std::sync::{Arc, Mutex};

use fence_object_store::object_store::memory::InMemory;
use support::{fence, Harness};

async fn memory() -> Option<Harness> {
    let store = Arc::new(InMemory::new());
    let holder_store = store.clone();
    Some(Harness {
        fence: Mutex::new(fence(store, "conformance/")),
        holder: Box::new(move || fence(holder_store.clone(), "conformance/")),
        restart: None,
        not_applicable: &[(
            "state_survives_restart",
            "object_store's InMemory lives in the process: nothing to restart",
        )],
        race_writers: 8,
        race_rounds: 30,
    })
}

fence_conformance::store_conformance!(memory);

#[tokio::test]
async fn commit_pointer_and_retirement_on_memory() {
    let fence = fence(Arc::new(InMemory::new()), "fence/");
    support::commit_pointer_and_retirement(&fence, "orders").await;
}
