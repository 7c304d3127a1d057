//! The log conformance suite on Apache Kafka: a dedicated KRaft broker per scenario (restarted
//! with kill -9 by the restart scenario) under scripts/test, or YOUR cluster: `FENCE_KAFKA_BOOTSTRAP=host:9092 [FENCE_KAFKA_PROPERTIES='security.protocol=SASL_SSL;...'] cargo test -p fence-kafka --test conformance`.
#![allow(clippy::expect_used)]

use fence_testkit::kafka as support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{LogHarness, NotApplicable};
use fence_core::{BoxError, FencedLog, Observed};
use fence_kafka::KafkaFence;
use fence_testkit::kafka_broker::KafkaServer;

struct Kafka {
    server: Option<KafkaServer>,
    bootstrap: String,
    fence: Mutex<Observed<KafkaFence>>,
}

#[async_trait]
impl LogHarness for Kafka {
    fn log(&self) -> Arc<dyn FencedLog> {
        Arc::new(self.fence.lock().expect("lock").clone())
    }

    // Another process: its own producers and no known marks, so the ledger decides.
    fn holder(&self) -> Arc<dyn FencedLog> {
        let fence = self.fence.lock().expect("lock").clone();
        Arc::new(
            support::fence_builder(&support::client_config(&self.bootstrap), fence.data_topic())
                .build()
                .expect("valid configuration"),
        )
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        let Some(server) = &self.server else {
            return Ok(false); // your own cluster: not ours to restart
        };
        server.restart();
        let fence = self.fence.lock().expect("lock").clone();
        // A new process after the restart: same topics, nothing cached.
        let rebuilt = KafkaFence::builder(support::client_config(&server.bootstrap()))
            .data_topic(fence.data_topic())
            .ledger_topic(format!("{}-ledger", fence.data_topic()))
            .transactional_id_prefix(format!("{}-", fence.data_topic()))
            .connect()
            .await?;
        *self.fence.lock().expect("lock") = rebuilt;
        Ok(true)
    }

    // Nothing listens on port 1: invalid input must be refused before any request is made.
    fn unreachable_log(&self) -> Option<Arc<dyn FencedLog>> {
        let fence = self.fence.lock().expect("lock").clone();
        Some(Arc::new(
            support::fence_builder(&support::client_config("127.0.0.1:1"), fence.data_topic())
                .build()
                .expect("valid configuration"),
        ))
    }

    fn not_applicable(&self) -> NotApplicable {
        if self.server.is_some() {
            &[]
        } else {
            &[(
                "log_state_survives_restart",
                "your own cluster (FENCE_KAFKA_BOOTSTRAP): not the test's to restart",
            )]
        }
    }
}

async fn kafka() -> Option<Kafka> {
    if let Some(bootstrap) = support::external_cluster() {
        let fence = support::fence_on(&bootstrap, "conformance").await;
        return Some(Kafka {
            server: None,
            bootstrap,
            fence: Mutex::new(fence),
        });
    }
    let server = KafkaServer::start("conformance")?;
    let fence = support::fence_on(&server.bootstrap(), "conformance").await;
    Some(Kafka {
        bootstrap: server.bootstrap(),
        server: Some(server),
        fence: Mutex::new(fence),
    })
}

fence_conformance::log_conformance!(kafka);

#[test]
fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention};
    let fence = KafkaFence::builder(support::client_config("127.0.0.1:1"))
        .data_topic("events")
        .build()
        .expect("valid configuration");
    let caps = fence.capabilities();
    assert_eq!(
        caps,
        Capabilities::log()
            .with_op_id_retention(OpIdRetention::PerDomain(64))
            .with_max_value_bytes(Some(8 * 1024 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.append && caps.claim && caps.strict_policy && caps.op_id_replay());
    assert!(!caps.write && !caps.delete);
}
