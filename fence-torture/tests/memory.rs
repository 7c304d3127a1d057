//! The torture run on the embedded default: `MemoryFence` with `MemoryLeases`, workers frozen
//! past their lease (no network, so no other faults).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, MemoryFence, MemoryLeases};
use fence_torture::{engine, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_holds_under_torture() {
    let target = Target::new(
        Arc::new(MemoryFence::new()),
        Arc::new(MemoryLeases::new()),
        Domain::new("torture/memory").unwrap(),
    );
    let profile = support::profile(support::seed(11), Duration::from_millis(40), false);
    let run = engine::run(&profile, &target).await;
    support::verify("memory", &run, false);
}
