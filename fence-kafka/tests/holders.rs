//! Holders are bounded and can be released: idle producers are dropped past `max_holders`, and
//! a dropped or released holder claims again on its next append, still fenced by the ledger.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fence_conformance::services::{assert_fenced, domain, token};
use fence_core::{AppendRequest, Fence, FencedLog, Record};
use fence_kafka::KafkaFence;
use fence_testkit::kafka as support;

fn batch(name: &str, t: u64, value: &str) -> AppendRequest {
    AppendRequest::new(domain(name), token(t), vec![Record::new(value.to_owned())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_are_bounded_and_released_holders_claim_again() {
    let Some(bootstrap) = support::shared_bootstrap() else {
        return;
    };
    let config = support::client_config(&bootstrap);
    let topic = support::unique("holders");
    support::create_topic(&config, &topic).await;
    let fence = KafkaFence::builder(config)
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(20))
        .max_holders(2)
        .connect()
        .await
        .unwrap();
    for name in ["a", "b", "c"] {
        fence.append(&batch(name, 1, name)).await.unwrap();
        assert!(fence.holders() <= 2, "{} holders kept", fence.holders());
    }
    // "a" was dropped as idle: its next append claims again and is accepted.
    fence.append(&batch("a", 1, "a2")).await.unwrap();
    fence.release(&domain("a"), token(1));
    assert!(
        fence.holders() <= 1,
        "{} holders after release",
        fence.holders()
    );
    // A newer owner takes "a" through another process's fence; the released old holder is
    // refused when it comes back, by the ledger (this fence never saw mark 2).
    let newer = KafkaFence::builder(support::client_config(&bootstrap))
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    newer.claim(&domain("a"), token(2)).await.unwrap();
    assert_fenced(fence.append(&batch("a", 1, "zombie")).await, 1, 2);
    let values: Vec<String> = fence
        .read_log(&domain("a"))
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.record.value).into_owned())
        .collect();
    assert_eq!(values, ["a", "a2"]);
}
