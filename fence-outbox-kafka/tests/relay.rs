//! fence-testkit's relay contract on the Kafka outbox, on Apache Kafka (leases from the shared
//! Redis, as the Kafka relay's tests always took them): exactly-once observed delivery in order
//! across a relay crash, a failing head holding back its domain only, stuck sinks, a paused relay
//! fenced by its successor, concurrency, and the relay torture run.
//!
//! Declared not run here, with why: the dead-letter scenario ends with an operator discarding
//! a dead letter, and the Kafka outbox has no discard (entries are records of a topic: a dead
//! letter stays in the log, marked by the relay's progress record; `tests/kafka.rs` covers
//! dead-lettering itself); the purge scenario expects delivered entries removed after a
//! retention window, and a topic's records go by the topic's own retention, not by the relay;
//! the relay-mark vectors set a mark per domain, and the Kafka relay keeps one per partition
//! (its progress domain, appended through fence-kafka: its decision is checked by the log
//! decision vectors of fence-kafka's conformance suite).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::relay::OutboxUnderTest;
use fence_conformance::relay_kit::{fast_relay, kinds};
use fence_core::{Domain, FencingToken, LeaseManager, Observed, OperationId, Record};
use fence_outbox::{Effect, OutboxConfig, OutboxEntry, OutboxError, Relay, RelayConfig, Sink};
use fence_outbox_kafka::{KafkaOutbox, KafkaTransition};
use fence_redis::RedisFence;
use fence_testkit::kafka::{fence_on_topic, fresh_topic};

/// The relays' name: the relay contract's configurations all use it.
const RELAY_NAME: &str = "test";

struct KafkaUnderTest {
    outbox: KafkaOutbox,
    leases: Observed<RedisFence>,
}

async fn under_test(test: &str) -> Option<KafkaUnderTest> {
    let (config, topic) = fresh_topic(&format!("relay-{test}"), 2).await?;
    // A unique prefix per call: each scenario its own lease keys.
    let leases = fence_testkit::redis::shared_fence("kafka-relay").await?;
    let outbox = KafkaOutbox::with_config(
        fence_on_topic(&config, &topic).await,
        OutboxConfig::new(kinds()),
    );
    Some(KafkaUnderTest { outbox, leases })
}

#[async_trait]
impl OutboxUnderTest for KafkaUnderTest {
    async fn pay(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &str,
        url: &str,
        payload: &str,
    ) -> Result<usize, OutboxError> {
        let transition = KafkaTransition::new(domain.clone(), token, OperationId::new(op_id)?)
            .record(Record::new(format!(
                "{{\"order\":\"{domain}\",\"status\":\"paid by {token}\"}}"
            )))
            .effect(Effect::new("send-receipt-email", url, payload.to_owned()));
        let recorded = self.outbox.transition(&transition).await?;
        Ok(if recorded.duplicate {
            0
        } else {
            recorded.keys.len()
        })
    }

    async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        // A fresh view of the topic and of the relays' progress, as an operator's tool reads it.
        self.outbox
            .relay_store(RELAY_NAME, 0)?
            .entries(domain)
            .await
    }

    async fn dead_letters(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        Ok(self
            .entries(domain)
            .await?
            .into_iter()
            .filter(|e| matches!(e.status, fence_outbox::EntryStatus::DeadLettered { .. }))
            .collect())
    }

    async fn discard_dead_letter(&self, _: &Domain, _: u64) -> Result<bool, OutboxError> {
        // Declared above: the Kafka outbox has no discard; the one scenario using it is not run.
        Ok(false)
    }

    fn relay(&self, sink: Arc<dyn Sink>, config: RelayConfig) -> Result<Relay, OutboxError> {
        let leases: Arc<dyn LeaseManager> = Arc::new(self.leases.leases());
        let store = self.outbox.relay_store(RELAY_NAME, config.partition)?;
        Relay::new(Arc::new(store), sink, leases, config)
    }

    fn store(&self) -> Result<Arc<dyn fence_outbox::OutboxStore>, OutboxError> {
        Ok(Arc::new(self.outbox.relay_store(RELAY_NAME, 0)?))
    }

    async fn expire_relay_lease(&self) {
        let lease_domain = fast_relay("x").lease_domain().unwrap();
        fence_testkit::redis::expire_lease(&self.leases, &lease_domain).await;
    }
}

fence_conformance::relay_contract_tests!(under_test;
    exactly_once_despite_failures_and_a_relay_crash,
    a_failing_head_holds_back_its_domain_only,
    a_stuck_sink_times_out_and_the_retry_lands_once,
    a_paused_relay_cannot_complete_after_its_successor,
    domains_are_served_concurrently_each_in_order,
    relays_under_torture_deliver_each_accepted_effect_once_in_order,
    the_attempt_limit_holds_across_a_handover,
);
