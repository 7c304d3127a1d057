//! Operation-id retention, run by each adapter with a small retention: what is remembered is
//! replayed (also by a new client, as after a restart of the caller), and what the declared
//! bound has evicted is a new operation again.

use fence_core::{
    AppendOutcome, AppendRequest, Domain, FencedLog, FencedStore, OpIdRetention, OperationId,
    Record, WriteOutcome, WriteRequest,
};

use crate::services::token;

fn op(n: usize) -> OperationId {
    OperationId::new(format!("op-{n}")).unwrap_or_else(|e| panic!("{e}"))
}

fn declared(retention: OpIdRetention) -> usize {
    match retention {
        OpIdRetention::PerDomain(n) => n,
        other => panic!("these checks need a per-domain retention, the store declares {other:?}"),
    }
}

/// With the last `n` op ids kept per domain (`n` as declared by `store`): after `n + 1`
/// writes the first op id is forgotten, and the last `n` are replayed by `store` and by
/// `other`, an independent client of the same backend. Panics on any breach.
pub async fn store_keeps_the_last_op_ids(
    store: &dyn FencedStore,
    other: &dyn FencedStore,
    domain: &Domain,
) {
    let n = declared(store.capabilities().op_id_retention);
    let write =
        |i: usize| WriteRequest::put(domain.clone(), token(1), format!("v{i}")).with_op_id(op(i));
    let mut first = Vec::new();
    for i in 0..=n {
        match store.write(&write(i)).await {
            Ok(WriteOutcome::Accepted(accepted)) => first.push(accepted),
            other => panic!("op {i}: expected accepted, got {other:?}"),
        }
    }
    for (i, outcome) in first.iter().enumerate().skip(1) {
        for (who, client) in [("the same client", store), ("another client", other)] {
            let replay = client.write(&write(i)).await;
            assert!(
                matches!(&replay, Ok(WriteOutcome::Duplicate(a)) if a == outcome),
                "op {i} is within the last {n}: {who} must replay {outcome:?}, got {replay:?}"
            );
        }
    }
    // The oldest was evicted by the bound: its retry is a new operation, applied again.
    match other.write(&write(0)).await {
        Ok(WriteOutcome::Accepted(again)) => assert_eq!(
            again.revision.get(),
            n as u64 + 2,
            "an evicted op id applies as a new write"
        ),
        other => {
            panic!("op 0 was evicted after {n} newer ones: expected a new write, got {other:?}")
        }
    }
}

/// The same for a log: after `n + 1` appends the first op id is forgotten.
pub async fn log_keeps_the_last_op_ids(
    log: &dyn FencedLog,
    other: &dyn FencedLog,
    domain: &Domain,
) {
    let n = declared(log.capabilities().op_id_retention);
    let append = |i: usize| {
        AppendRequest::new(domain.clone(), token(1), vec![Record::new(format!("r{i}"))])
            .with_op_id(op(i))
    };
    let mut first = Vec::new();
    for i in 0..=n {
        match log.append(&append(i)).await {
            Ok(AppendOutcome::Appended(appended)) => first.push(appended),
            other => panic!("op {i}: expected appended, got {other:?}"),
        }
    }
    for (i, outcome) in first.iter().enumerate().skip(1) {
        for (who, client) in [("the same client", log), ("another client", other)] {
            let replay = client.append(&append(i)).await;
            assert!(
                matches!(&replay, Ok(AppendOutcome::Duplicate(a)) if a == outcome),
                "op {i} is within the last {n}: {who} must replay {outcome:?}, got {replay:?}"
            );
        }
    }
    let evicted = other.append(&append(0)).await;
    assert!(
        matches!(evicted, Ok(AppendOutcome::Appended(_))),
        "op 0 was evicted after {n} newer ones: expected a new append, got {evicted:?}"
    );
    let records = log
        .read_log(domain)
        .await
        .unwrap_or_else(|e| panic!("read_log: {e}"));
    let values: Vec<_> = records.iter().map(|e| e.record.value.clone()).collect();
    let mut expected: Vec<_> = (0..=n).map(|i| format!("r{i}")).collect();
    expected.push("r0".into());
    assert_eq!(
        values,
        expected
            .into_iter()
            .map(fence_core::Bytes::from)
            .collect::<Vec<_>>(),
        "replays appended nothing; the evicted op appended once more"
    );
}
