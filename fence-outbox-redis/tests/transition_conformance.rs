//! The conformance suite for Redis outbox transitions, an entry point that is not a trait
//! method: each run records one effect, so the entries recorded count the runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::entry::{Call, EntryHarness, Ran};
use fence_conformance::relay_kit::fence_error;
use fence_core::{Domain, Fence, FenceError};
use fence_outbox::Effect;
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};

struct TransitionHarness {
    outbox: RedisOutbox,
    script: OutboxScript,
}

#[async_trait]
impl EntryHarness for TransitionHarness {
    async fn run(&self, call: &Call) -> Result<Ran, FenceError> {
        let op_id = call
            .op_id
            .clone()
            .expect("the suite gives every call an op id");
        let transition = RedisTransition::new(call.domain.clone(), call.token, op_id)
            .with_policy(call.policy)
            .key("runs")
            .effect(Effect::new("enqueue", "jobs", "payload"));
        let recorded = self
            .outbox
            .transition(&self.script, &transition)
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
    let fence = support::standalone("transition-entry").await?;
    Some(Box::leak(Box::new(TransitionHarness {
        outbox: support::outbox(&fence),
        script: OutboxScript::new("return redis.call('INCR', KEYS[1])"),
    })))
}

fence_conformance::entry_conformance!(harness);
