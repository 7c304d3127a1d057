//! The conformance suite against `MemoryFence`, the reference resource: as a store and as a log.

use std::sync::Arc;

use fence_conformance::{LogHarness, StoreHarness};
use fence_core::{FencedLog, FencedStore, MemoryFence};

/// A fresh in-memory resource per scenario, with a value limit so the size checks run.
struct Memory(Arc<MemoryFence>);

impl StoreHarness for Memory {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.0.clone()
    }
}

impl LogHarness for Memory {
    fn log(&self) -> Arc<dyn FencedLog> {
        self.0.clone()
    }
}

async fn memory() -> Option<Memory> {
    Some(Memory(Arc::new(
        MemoryFence::new().with_max_value_bytes(64 * 1024),
    )))
}

mod store {
    fence_conformance::store_conformance!(super::memory);
}

mod log {
    fence_conformance::log_conformance!(super::memory);
}

#[test]
fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention, DEFAULT_OP_ID_RETENTION};
    let caps = MemoryFence::new()
        .with_max_value_bytes(64 * 1024)
        .capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_append(true)
            .with_op_id_retention(OpIdRetention::PerDomain(DEFAULT_OP_ID_RETENTION))
            .with_max_value_bytes(Some(64 * 1024)),
        "a change here changes which conformance scenarios run"
    );
    assert!(
        !caps.survives_restart,
        "memory does not survive a restart, and says so"
    );
}

#[tokio::test]
async fn op_id_retention_is_bounded_as_declared() {
    let memory = MemoryFence::new().with_op_id_retention(3);
    let d = fence_conformance::services::domain;
    fence_conformance::retention::store_keeps_the_last_op_ids(&memory, &memory, &d("store")).await;
    fence_conformance::retention::log_keeps_the_last_op_ids(&memory, &memory, &d("log")).await;
}
