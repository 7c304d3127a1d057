//! Transitions on the DynamoDB outbox (moto in the test command): effects are written with the
//! caller's actions and the fence's check in one transaction, all or nothing; a stale token
//! writes nothing, refused by DynamoDB itself when the writer's fence remembers an older mark;
//! a replayed op id records nothing twice; concurrent transitions number a domain's entries
//! densely; dead letters are re-driven, discarded, and do not hold purges back; bad input is
//! refused before any I/O.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use fence_core::{Fence, FenceError, FencingToken, InvalidInput, TransactionRequest};
use fence_outbox::{Effect, EntryStatus, OutboxConfig, OutboxError, OutboxStore, Settlement};
use fence_outbox_dynamodb::{DynamoDbOutbox, MAX_EFFECTS};
use support::{domain, kinds, mark_paid, op, order_status, outbox, pay, progress_item, token};

const URL: &str = "http://127.0.0.1:9/receipt";

#[tokio::test]
async fn a_stale_token_writes_neither_effects_nor_state() {
    let Some(outbox) = outbox("ob_stale").await else {
        return;
    };
    let d = domain("order-1");
    assert_eq!(
        pay(&outbox, &d, token(5), "pay-5", URL, "a").await.unwrap(),
        1
    );
    let stale = pay(&outbox, &d, token(4), "pay-4", URL, "b").await;
    assert!(
        matches!(&stale, Err(OutboxError::Fence(FenceError::Fenced { .. }))),
        "{stale:?}"
    );
    let entries = outbox.entries(&d).await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!(entries[0].token, token(5));
    assert_eq!(
        order_status(&outbox, &d).await.as_deref(),
        Some("paid by 5")
    );
}

/// The refusal comes from DynamoDB's condition: a writer whose fence remembers an older mark
/// sends its transaction, and DynamoDB cancels it whole.
#[tokio::test]
async fn a_writer_with_a_remembered_older_mark_is_refused_by_dynamodb() {
    let Some(first) = outbox("ob_stale_cached").await else {
        return;
    };
    let other = fence_testkit::dynamodb::another_client(first.fence().dynamodb());
    let second = DynamoDbOutbox::new(other.fence(), first.table(), kinds()).unwrap();
    let d = domain("order-6");
    pay(&first, &d, token(1), "pay-1", URL, "a").await.unwrap();
    // The second writer's fence remembers mark 2 after its own transition.
    pay(&second, &d, token(2), "pay-2", URL, "b").await.unwrap();
    pay(&first, &d, token(3), "pay-3", URL, "c").await.unwrap();
    let stale = pay(&second, &d, token(2), "pay-2-again", URL, "late").await;
    assert!(
        stale.as_ref().is_err_and(OutboxError::is_fenced),
        "{stale:?}"
    );
    let tokens: Vec<u64> = first
        .entries(&d)
        .await
        .unwrap()
        .iter()
        .map(|e| e.token.get())
        .collect();
    assert_eq!(tokens, [1, 2, 3], "the late transition recorded nothing");
    assert_eq!(order_status(&first, &d).await.as_deref(), Some("paid by 3"));
}

#[tokio::test]
async fn a_replayed_op_id_records_nothing_twice_and_tokens_are_exact() {
    let Some(outbox) = outbox("ob_replay").await else {
        return;
    };
    let d = domain("order-2");
    for value in [(1u64 << 53) + 1, u64::MAX] {
        let t = FencingToken::new(value).unwrap();
        let effects = [
            Effect::new("send-receipt-email", URL, "a"),
            Effect::new("send-receipt-email", URL, "b"),
        ];
        let request = TransactionRequest::new(d.clone(), t).with_op_id(op(&format!("t{value}")));
        let first = outbox
            .transition(&request, vec![mark_paid(&outbox, &d, t)], &effects)
            .await
            .unwrap();
        assert!(!first.duplicate);
        let keys: Vec<&str> = first.keys.iter().map(|k| k.as_str()).collect();
        assert_eq!(keys.len(), 2);
        assert!(
            keys.iter().all(|k| k.contains(&format!(":{value}:"))),
            "{keys:?}"
        );
        let again = outbox
            .transition(&request, vec![mark_paid(&outbox, &d, t)], &effects)
            .await
            .unwrap();
        assert!(again.duplicate && again.keys.is_empty(), "{again:?}");
    }
    let entries = outbox.entries(&d).await.unwrap();
    let numbered: Vec<(u64, u64)> = entries.iter().map(|e| (e.seq, e.token.get())).collect();
    assert_eq!(
        numbered,
        [
            (1, (1 << 53) + 1),
            (2, (1 << 53) + 1),
            (3, u64::MAX),
            (4, u64::MAX)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transitions_number_a_domain_densely() {
    let Some(outbox) = outbox("ob_race").await else {
        return;
    };
    let d = domain("order-3");
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let (outbox, d) = (outbox.clone(), d.clone());
            tokio::spawn(async move {
                for n in 0..5 {
                    let op_id = format!("w{writer}-{n}");
                    pay(&outbox, &d, token(1), &op_id, URL, &op_id)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let entries = outbox.entries(&d).await.unwrap();
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    let payloads: BTreeSet<Vec<u8>> = entries.iter().map(|e| e.payload.to_vec()).collect();
    assert_eq!(payloads.len(), 20, "each transition's effect once");
}

#[tokio::test]
async fn dead_letters_are_redriven_after_the_last_entry_and_discarded() {
    let Some(outbox) = outbox("ob_dead").await else {
        return;
    };
    let d = domain("order-4");
    for n in 0..2 {
        pay(&outbox, &d, token(1), &format!("pay-{n}"), URL, "x")
            .await
            .unwrap();
    }
    let relay = token(7);
    assert_eq!(outbox.begin(&d, relay, 1).await.unwrap(), Some(1));
    let dead = Settlement::DeadLetter {
        error: "HTTP 410".into(),
    };
    assert!(outbox.settle(&d, relay, 1, &dead).await.unwrap());
    // An older relay is fenced; a settled entry is no longer the head.
    let older = outbox.begin(&d, token(6), 2).await;
    assert!(matches!(&older, Err(e) if e.is_fenced()), "{older:?}");
    assert_eq!(outbox.begin(&d, relay, 1).await.unwrap(), None);
    let letters = outbox.dead_letters(&d).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(outbox.redrive_dead_letter(&d, 1).await.unwrap(), Some(3));
    let entries = outbox.entries(&d).await.unwrap();
    let last = entries.last().unwrap();
    assert_eq!(last.seq, 3);
    assert!(matches!(
        last.status,
        EntryStatus::Pending { attempts: 0, .. }
    ));
    assert_eq!(last.key, letters[0].key, "the same idempotency key");
    assert_eq!(last.recorded_at_ms, letters[0].recorded_at_ms);
    assert!(entries.iter().all(|e| e.seq != 1), "moved, not copied");
    assert!(
        !progress_item(&outbox, &d)
            .await
            .unwrap()
            .contains_key("dls"),
        "no longer listed as a dead letter"
    );
    assert_eq!(outbox.redrive_dead_letter(&d, 1).await.unwrap(), None);
    assert!(
        !outbox.discard_dead_letter(&d, 2).await.unwrap(),
        "2 is pending"
    );
    // The head is 2, then 3.
    let pending: Vec<u64> = outbox
        .pending(&d, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(pending, [2, 3]);
}

/// A dead letter does not hold the purge back: later delivered entries go, `kept` moves past
/// it, and it stays listed until an operator discards it. An older relay may not purge.
#[tokio::test]
async fn purges_move_past_a_dead_letter_which_stays_listed() {
    let Some(outbox) = outbox("ob_purge").await else {
        return;
    };
    let d = domain("order-7");
    for n in 0..3 {
        pay(&outbox, &d, token(1), &format!("pay-{n}"), URL, "x")
            .await
            .unwrap();
    }
    let relay = token(2);
    let dead = Settlement::DeadLetter {
        error: "HTTP 410".into(),
    };
    for (seq, settlement) in [
        (1, &dead),
        (2, &Settlement::Delivered),
        (3, &Settlement::Delivered),
    ] {
        assert_eq!(outbox.begin(&d, relay, seq).await.unwrap(), Some(1));
        assert!(outbox.settle(&d, relay, seq, settlement).await.unwrap());
    }
    let candidate = outbox
        .candidates(0, true)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.domain == d)
        .unwrap();
    let older = outbox
        .purge(&candidate, token(1), Duration::ZERO, true)
        .await;
    assert!(matches!(&older, Err(e) if e.is_fenced()), "{older:?}");
    assert_eq!(outbox.entries(&d).await.unwrap().len(), 3, "nothing purged");
    let purged = outbox
        .purge(&candidate, relay, Duration::ZERO, true)
        .await
        .unwrap();
    assert_eq!(purged.removed, 2);
    let progress = progress_item(&outbox, &d).await.unwrap();
    let kept = progress.get("kept").and_then(|k| k.as_n().ok());
    assert_eq!(kept.map(String::as_str), Some("4"), "{progress:?}");
    assert!(
        !progress.contains_key("pend"),
        "a drained domain leaves the index: {progress:?}"
    );
    let entries = outbox.entries(&d).await.unwrap();
    let left: Vec<(u64, bool)> = entries
        .iter()
        .map(|e| (e.seq, e.is_dead_letter()))
        .collect();
    assert_eq!(left, [(1, true)]);
    assert!(outbox.discard_dead_letter(&d, 1).await.unwrap());
    assert!(outbox.entries(&d).await.unwrap().is_empty());
    assert!(!progress_item(&outbox, &d)
        .await
        .unwrap()
        .contains_key("dls"));
}

#[tokio::test]
async fn bad_configuration_and_input_are_refused_before_any_io() {
    let Some(outbox) = outbox("ob_bad").await else {
        return;
    };
    let fence = outbox.fence().clone();
    let own = fence.dynamodb().table().to_owned();
    let same = DynamoDbOutbox::new(fence.clone(), own, kinds());
    assert!(
        matches!(&same, Err(OutboxError::Configuration(why)) if why.contains("table of its own")),
        "{same:?}"
    );
    for config in [
        OutboxConfig::new(kinds()).max_effects(MAX_EFFECTS + 1),
        // 64 effects of 64 KiB: more than one transaction carries.
        OutboxConfig::new(kinds())
            .max_effects(64)
            .max_payload_bytes(64 * 1024),
    ] {
        let refused = DynamoDbOutbox::with_config(fence.clone(), "elsewhere", config);
        assert!(
            matches!(&refused, Err(OutboxError::Configuration(why)) if why.contains("4 MB")),
            "{refused:?}"
        );
    }
    let d = domain("order-5");
    let no_op_id = TransactionRequest::new(d.clone(), token(1));
    let effect = [Effect::new("send-receipt-email", URL, "a")];
    let refused = outbox.transition(&no_op_id, Vec::new(), &effect).await;
    assert!(
        matches!(&refused, Err(OutboxError::Configuration(why)) if why.contains("op id")),
        "{refused:?}"
    );
    let request = no_op_id.with_op_id(op("crowded"));
    let actions = vec![mark_paid(&outbox, &d, token(1)); MAX_EFFECTS];
    let crowded = outbox.transition(&request, actions, &effect).await;
    assert!(
        matches!(
            &crowded,
            Err(OutboxError::Fence(FenceError::InvalidInput(InvalidInput::Configuration(why))))
                if why.contains("at most 98 actions and effects together")
        ),
        "{crowded:?}"
    );
    let unknown = outbox
        .transition(
            &request,
            Vec::new(),
            &[Effect::new("no-such-kind", URL, "a")],
        )
        .await;
    assert!(
        matches!(&unknown, Err(OutboxError::UnknownKind { kind, .. }) if kind == "no-such-kind"),
        "{unknown:?}"
    );
    // Nothing reached the resource: no mark, no entries.
    assert_eq!(fence.high_water_mark(&d).await.unwrap(), None);
    assert!(outbox.entries(&d).await.unwrap().is_empty());
}
