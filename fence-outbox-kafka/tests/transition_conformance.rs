//! The conformance suite for Kafka outbox transitions, an entry point that is not a trait
//! method: each run appends one state record with its effect, so the domain's committed state
//! records count the runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::entry::{Call, EntryHarness, Ran};
use fence_conformance::relay_kit::fence_error;
use fence_core::{Domain, Fence, FenceError, FencedLog, Record};
use fence_outbox::{Effect, OutboxConfig};
use fence_outbox_kafka::{KafkaOutbox, KafkaTransition, KEY_HEADER};
use fence_testkit::kafka::{fence_on_topic, fresh_topic};

struct TransitionHarness {
    outbox: KafkaOutbox,
}

#[async_trait]
impl EntryHarness for TransitionHarness {
    async fn run(&self, call: &Call) -> Result<Ran, FenceError> {
        let op_id = call
            .op_id
            .clone()
            .expect("the suite gives every call an op id");
        let transition = KafkaTransition::new(call.domain.clone(), call.token, op_id)
            .with_policy(call.policy)
            .record(Record::new("state"))
            .effect(Effect::new("enqueue", "jobs", "payload"));
        let recorded = self
            .outbox
            .transition(&transition)
            .await
            .map_err(fence_error)?;
        Ok(Ran {
            duplicate: recorded.duplicate,
            previous: recorded.previous_high_water_mark,
        })
    }

    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError> {
        let log = self.outbox.fence().read_log(domain).await?;
        let state = log
            .iter()
            .filter(|e| !e.record.headers.iter().any(|(name, _)| name == KEY_HEADER))
            .count();
        Ok(state as u64)
    }

    fn fence(&self) -> Arc<dyn Fence> {
        Arc::new(self.outbox.fence().clone())
    }

    fn requires_op_id(&self) -> bool {
        true
    }
}

async fn harness() -> Option<&'static TransitionHarness> {
    let (config, topic) = fresh_topic("transition-entry", 1).await?;
    let fence = fence_on_topic(&config, &topic).await;
    Some(Box::leak(Box::new(TransitionHarness {
        outbox: KafkaOutbox::with_config(
            fence,
            OutboxConfig::new(fence_conformance::relay_kit::kinds()),
        ),
    })))
}

fence_conformance::entry_conformance!(harness);
