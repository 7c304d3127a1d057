//! The contract of [`Retirer`]: retiring a domain removes its state at the resource, and
//! nothing else's, and never while a lease on it is live. Each function panics (failing the
//! calling test) on a breach.

use std::time::Duration;

use fence_core::{
    Domain, FenceError, FencedStore, LeaseManager, OperationId, OwnerId, Retirer, WriteRequest,
};

use crate::services::{mark_of, put, token, value_of};

/// Retires the fresh `domain` after a write with an operation id (and `<domain>-kept`, written
/// too, is left alone). With `leases`, a retirement under a live lease is refused and removes
/// nothing; once the lease is released it goes through. The domain then has no mark, no
/// value, and no memory of the operation id (the same id writes afresh); a second retirement
/// removes nothing.
pub async fn retirement_removes_the_domain_and_nothing_else(
    store: &dyn FencedStore,
    retirer: &dyn Retirer,
    leases: Option<&dyn LeaseManager>,
    domain: &Domain,
) {
    let kept = Domain::new(format!("{domain}-kept")).unwrap_or_else(|e| panic!("{e}"));
    let op = OperationId::new("retire/first").unwrap_or_else(|e| panic!("{e}"));
    let write = |t: u64, value: &str| {
        WriteRequest::put(domain.clone(), token(t), value.to_owned()).with_op_id(op.clone())
    };
    store
        .write(&write(7, "retiring"))
        .await
        .unwrap_or_else(|e| panic!("the write before retiring: {e}"));
    put(store, &kept, 3, "kept")
        .await
        .unwrap_or_else(|e| panic!("the other domain's write: {e}"));

    if let Some(leases) = leases {
        let owner = OwnerId::new("retire-holder").unwrap_or_else(|e| panic!("{e}"));
        let lease = leases
            .acquire(domain, &owner, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("the lease before retiring: {e}"));
        match retirer.retire(domain).await {
            Err(FenceError::LeaseHeld { domain: named }) if named == *domain => {}
            other => panic!("a retirement under a live lease: expected LeaseHeld, got {other:?}"),
        }
        assert_eq!(
            mark_of(store, domain).await,
            Some(token(7)),
            "a refused retirement removed the mark"
        );
        leases
            .release(&lease)
            .await
            .unwrap_or_else(|e| panic!("releasing the lease: {e}"));
    }

    let retired = retirer
        .retire(domain)
        .await
        .unwrap_or_else(|e| panic!("retiring `{domain}`: {e}"));
    assert!(
        retired.removed >= 1,
        "a retirement removed nothing: {retired:?}"
    );
    assert_eq!(mark_of(store, domain).await, None, "the mark survived");
    assert_eq!(value_of(store, domain).await, None, "the value survived");
    let again = store
        .write(&write(2, "reused id"))
        .await
        .unwrap_or_else(|e| panic!("a write after retiring: {e}"));
    assert!(
        !again.is_duplicate() && again.accepted().token == token(2),
        "the operation id outlived its domain: {again:?}"
    );
    assert_eq!(value_of(store, domain).await.as_deref(), Some("reused id"));

    retirer
        .retire(domain)
        .await
        .unwrap_or_else(|e| panic!("retiring `{domain}` again: {e}"));
    let empty = retirer
        .retire(domain)
        .await
        .unwrap_or_else(|e| panic!("retiring the empty `{domain}`: {e}"));
    assert_eq!(empty.removed, 0, "an empty domain had state to remove");
    assert_eq!(
        mark_of(store, &kept).await,
        Some(token(3)),
        "retiring `{domain}` touched `{kept}`"
    );
    assert_eq!(value_of(store, &kept).await.as_deref(), Some("kept"));
}
