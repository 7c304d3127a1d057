//! The conformance suite for PostgreSQL outbox transitions, an entry point that is not a trait
//! method: each run records one effect, so the entries recorded count the runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::entry::{Call, EntryHarness, Ran};
use fence_conformance::relay_kit::fence_error;
use fence_core::{Domain, Fence, FenceError};
use fence_outbox::Effect;
use fence_outbox_postgres::PostgresOutbox;
use fence_postgres::TransactionRequest;

struct TransitionHarness {
    outbox: PostgresOutbox,
}

#[async_trait]
impl EntryHarness for TransitionHarness {
    async fn run(&self, call: &Call) -> Result<Ran, FenceError> {
        let op_id = call
            .op_id
            .clone()
            .expect("the suite gives every call an op id");
        let request = TransactionRequest::new(call.domain.clone(), call.token)
            .with_op_id(op_id)
            .with_policy(call.policy);
        let recorded = self
            .outbox
            .transition(&request, &[Effect::new("enqueue", "jobs", "payload")])
            .await
            .map_err(fence_error)?;
        Ok(Ran {
            duplicate: recorded.duplicate,
            previous: recorded.previous_high_water_mark,
        })
    }

    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError> {
        let entries = self.outbox.entries(domain).await.map_err(fence_error)?;
        Ok(entries.len() as u64)
    }

    fn fence(&self) -> Arc<dyn Fence> {
        Arc::new(self.outbox.fence().clone())
    }

    fn requires_op_id(&self) -> bool {
        true
    }
}

async fn harness() -> Option<&'static TransitionHarness> {
    let outbox = support::outbox("transition_entry").await?;
    Some(Box::leak(Box::new(TransitionHarness { outbox })))
}

fence_conformance::entry_conformance!(harness);
