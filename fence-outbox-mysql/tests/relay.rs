//! The relay on the MySQL outbox against the shared MariaDB and a real local webhook server
//! that deduplicates by Idempotency-Key: fence-conformance's relay contract (exactly-once
//! observed delivery in order across a relay crash, a paused relay fenced by its successor,
//! dead letters, stuck sinks, concurrency, the relay torture run) and its SQL scenarios (SKIP
//! LOCKED around open writers, stale writers that record nothing, a relay frozen mid-step),
//! plus exact tokens and partitions writers disagree on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_core::FencingToken;
use fence_mysql::{Begun, TransactionRequest};
use fence_outbox::{Effect, OutboxConfig, OutboxError};
use fence_outbox_mysql::MySqlOutbox;
use support::{domain, op, outbox, pay, token};

fence_conformance::relay_contract_tests!(support::under_test);
fence_conformance::sql_relay_tests!(support::under_test);

/// Tokens are exact `BIGINT UNSIGNED`: entries keep 2^63 and u64::MAX, in keys and columns,
/// and a transition recording in two calls numbers its keys on.
#[tokio::test]
async fn tokens_are_exact_to_u64_max_and_keys_number_on() {
    let Some(outbox) = outbox("exact_tokens").await else {
        return;
    };
    let d = domain("order-x");
    let url = "http://127.0.0.1:9/receipt";
    for value in [1u64 << 63, u64::MAX] {
        let t = FencingToken::new(value).unwrap();
        let request = TransactionRequest::new(d.clone(), t).with_op_id(op(&format!("t{value}")));
        let Begun::Admitted(mut tx) = outbox.fence().begin(&request).await.unwrap() else {
            panic!("admitted");
        };
        let first = outbox
            .record(&mut tx, &[Effect::new("send-receipt-email", url, "a")])
            .await
            .unwrap();
        let second = outbox
            .record(
                &mut tx,
                &[
                    Effect::new("send-receipt-email", url, "b"),
                    Effect::new("send-receipt-email", url, "c"),
                ],
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let keys: Vec<String> = first
            .iter()
            .chain(&second)
            .map(|k| k.as_str().to_owned())
            .collect();
        assert_eq!(keys.len(), 3);
        for (index, key) in keys.iter().enumerate() {
            assert!(key.ends_with(&format!(":{index}")), "{key}");
            assert!(key.contains(&format!(":{value}:")), "{key}");
        }
    }
    let entries = outbox.entries(&d).await.unwrap();
    let tokens: Vec<u64> = entries.iter().map(|e| e.token.get()).collect();
    assert_eq!(
        tokens,
        [1 << 63, 1 << 63, 1 << 63, u64::MAX, u64::MAX, u64::MAX]
    );
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
}

/// A writer computing another partition for a domain than the one it is listed in is refused
/// (and records nothing): its relay would never see the entry.
#[tokio::test]
async fn writers_that_disagree_on_partitions_are_refused() {
    let Some(one) = outbox("partitions").await else {
        return;
    };
    let url = "http://127.0.0.1:9/receipt";
    let two = MySqlOutbox::with_config(
        one.fence().clone(),
        OutboxConfig::new(support::kinds()).partitions(2),
    );
    // A domain the two-partition writer puts in partition 1.
    let d = (0..)
        .map(|i| domain(&format!("order-{i}")))
        .find(|d| two.config().partition_of(d) == 1)
        .unwrap();
    pay(&one, &d, token(1), "a", url, "listed in 0")
        .await
        .unwrap();
    let refused = pay(&two, &d, token(2), "b", url, "computes 1").await;
    assert!(
        matches!(&refused, Err(OutboxError::Configuration(why)) if why.contains("partition 0")),
        "{refused:?}"
    );
    let entries = one.entries(&d).await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:#?}");
}
