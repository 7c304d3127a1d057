//! The bounded step on the fence ledger, on the shared Kafka-protocol broker: claims and
//! appends too far above the ledger's mark are refused and commit nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::time::Duration;

use fence_conformance::admission;
use fence_conformance::services::domain;
use fence_kafka::KafkaFence;
use fence_testkit::kafka::fresh_topic;

const STEP: u64 = 1000;

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let Some((config, topic)) = fresh_topic("admission", 1).await else {
        return;
    };
    let fence = KafkaFence::builder(config)
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(20))
        .max_token_step(NonZeroU64::new(STEP).unwrap())
        .connect()
        .await
        .expect("connect to the broker");
    admission::log_runaway_tokens_are_refused(&fence, &domain("step"), STEP).await;
}
