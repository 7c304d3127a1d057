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

/// A runaway claim from another process is refused on the committed ledger before it opens a
/// producer: the owner's producer epoch is untouched, so the owner appends on without a retry.
#[tokio::test]
async fn a_runaway_claim_does_not_disturb_the_owner() {
    use fence_core::{AppendRequest, Fence, FenceError, FencedLog, Record};
    let Some((config, topic)) = fresh_topic("admission-owner", 1).await else {
        return;
    };
    let build = |retries: usize| {
        KafkaFence::builder(config.clone())
            .data_topic(&topic)
            .ledger_topic(format!("{topic}-ledger"))
            .transactional_id_prefix(format!("{topic}-"))
            .timeout(Duration::from_secs(20))
            .aborted_retries(retries)
            .max_token_step(NonZeroU64::new(STEP).unwrap())
    };
    let owner = build(0).connect().await.expect("connect");
    let runaway = build(0).connect().await.expect("connect");
    let d = domain("owned");
    let t = fence_conformance::services::token;
    owner.claim(&d, t(5)).await.unwrap();
    let append = |n: u64| AppendRequest::new(d.clone(), t(5), vec![Record::new(format!("r{n}"))]);
    owner.append(&append(1)).await.unwrap();
    match runaway.claim(&d, fence_core::FencingToken::MAX).await {
        Err(FenceError::TokenTooFar { .. }) => {}
        other => panic!("a runaway claim: {other:?}"),
    }
    owner
        .append(&append(2))
        .await
        .expect("the owner appends on, its producer undisturbed");
    let values: Vec<_> = owner
        .read_log(&d)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.record.value)
        .collect();
    assert_eq!(values, vec![&b"r1"[..], &b"r2"[..]]);
}

/// The step bound is this client's configuration: the broker runs no Fence code and has no
/// place to hold it, so another client of the same topics built without it is not bound (the
/// README says so, "Forged tokens"), and the runaway claim it commits fences the bounded
/// client's holders too. This shows the limit.
#[tokio::test]
async fn the_step_bound_binds_only_the_clients_configured_with_it() {
    use fence_core::{Fence, FencingToken};
    let Some((config, topic)) = fresh_topic("admission-unbound", 1).await else {
        return;
    };
    let build = || {
        KafkaFence::builder(config.clone())
            .data_topic(&topic)
            .ledger_topic(format!("{topic}-ledger"))
            .transactional_id_prefix(format!("{topic}-"))
            .timeout(Duration::from_secs(20))
    };
    let bounded = build()
        .max_token_step(NonZeroU64::new(STEP).unwrap())
        .connect()
        .await
        .expect("connect");
    let unbounded = build().connect().await.expect("connect");
    let d = domain("unbound");
    let t = fence_conformance::services::token;
    bounded.claim(&d, t(5)).await.unwrap();
    assert!(matches!(
        bounded.claim(&d, FencingToken::MAX).await,
        Err(fence_core::FenceError::TokenTooFar { .. })
    ));
    // The client without the bound claims u64::MAX: the ledger takes it.
    unbounded.claim(&d, FencingToken::MAX).await.unwrap();
    assert_eq!(
        bounded.committed_ledger(&d).await.unwrap().high_water_mark,
        Some(FencingToken::MAX)
    );
    // From then on every holder of an issued token is fenced, the bounded client's included.
    fence_conformance::services::assert_fenced(bounded.claim(&d, t(6)).await, 6, u64::MAX);
}
