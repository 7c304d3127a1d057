//! etcd's canonical guard and the bounded step on a real etcd: with `issued_only`, every
//! write's txn compares the lock key's `create_revision` with the token, so only the live
//! lease's token writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_conformance::services::{domain as d, put};
use fence_conformance::{admission, Namespace};
use fence_core::{
    BoundsConfig, Domain, FenceError, FencingToken, IssuerView, Lease, LeaseManager, Observed,
    OwnerId, TokenIssuer,
};
use fence_etcd::EtcdLeases;
use fence_testkit::etcd::shared_endpoints;
use tokio::sync::Mutex;

/// Tokens as etcd's canonical guard sees them: each issue releases the domain's previous lease
/// and acquires it again, so the newest token is the live lease's.
#[derive(Debug)]
struct LeaseTokens {
    leases: Observed<EtcdLeases>,
    held: Mutex<HashMap<Domain, Lease>>,
}

#[async_trait]
impl TokenIssuer for LeaseTokens {
    fn backend(&self) -> &'static str {
        "etcd leases"
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let mut held = self.held.lock().await;
        if let Some(previous) = held.remove(domain) {
            self.leases.release(&previous).await?;
        }
        let owner = OwnerId::new("admission-test").unwrap();
        let lease = self
            .leases
            .acquire(domain, &owner, Duration::from_secs(60))
            .await?;
        let token = lease.token;
        held.insert(domain.clone(), lease);
        Ok(token)
    }
}

fn lease_tokens(etcd: &fence_etcd::Etcd) -> LeaseTokens {
    LeaseTokens {
        leases: etcd.leases(),
        held: Mutex::new(HashMap::new()),
    }
}

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let Some(etcd) = support::shared("adm_step").await else {
        return;
    };
    let step = 1_000_000;
    let fence = etcd
        .fence_builder()
        .max_token_step(NonZeroU64::new(step).unwrap())
        .build();
    admission::runaway_tokens_are_refused(&fence, &d("step"), step).await;
}

/// The prefix's own settings bind a fence of another client built without any: the step and
/// issued-only are stored by one client and obeyed by the other, including on a state it had
/// cached before the setting (its txn compares the settings key); removing them lets the same
/// token through.
#[tokio::test]
async fn prefix_settings_bind_a_fence_built_without_them() {
    let Some(etcd) = support::shared("adm_prefix").await else {
        return;
    };
    let operator = etcd.fence();
    let other = support::connect(&shared_endpoints().unwrap()[0], etcd.prefix()).await;
    let plain = other.fence();
    let step = 1_000_000;
    assert_eq!(plain.resource_bounds().await.unwrap(), BoundsConfig::NONE);

    // A state cached before the setting: the client decides on it, etcd's compare refuses.
    let cached = d("cached");
    let first = put(&plain, &cached, 5, "before").await.unwrap();
    let first = first.accepted().token.get();
    operator
        .set_resource_bounds(BoundsConfig::new(NonZeroU64::new(step), false))
        .await
        .unwrap();
    match put(&plain, &cached, u64::MAX, "far").await {
        Err(FenceError::TokenTooFar { current, .. }) => {
            assert_eq!(current.map(FencingToken::get), Some(first))
        }
        other => panic!("u64::MAX on a cached state: expected TokenTooFar, got {other:?}"),
    }
    assert_eq!(
        plain.resource_bounds().await.unwrap(),
        BoundsConfig::new(NonZeroU64::new(step), false)
    );
    admission::runaway_tokens_are_refused_by_the_resource(&plain, &d("step"), step).await;

    operator
        .set_resource_bounds(BoundsConfig::new(None, true))
        .await
        .unwrap();
    admission::unissued_tokens_are_refused_by_the_resource(
        &plain,
        &lease_tokens(&other),
        &d("issued"),
    )
    .await;

    // The same token passes once the setting is gone: the setting refused it.
    operator
        .set_resource_bounds(BoundsConfig::NONE)
        .await
        .unwrap();
    put(&plain, &cached, u64::MAX, "far").await.unwrap();
}

/// A settings key Fence did not write fails every write under the prefix closed.
#[tokio::test]
async fn a_foreign_settings_key_fails_closed() {
    let Some(etcd) = support::shared("adm_foreign").await else {
        return;
    };
    etcd.client()
        .kv_client()
        .put(format!("{}/settings", etcd.prefix()), "max_step=lots", None)
        .await
        .unwrap();
    let fence = etcd.fence();
    match put(&fence, &d("x"), 1, "v").await {
        Err(FenceError::CorruptState { domain, detail, .. }) => {
            assert_eq!(domain, d("x"));
            assert!(detail.contains("max_step=lots"), "{detail}");
        }
        other => panic!("a write under foreign settings: {other:?}"),
    }
    match fence.resource_bounds().await {
        Err(error) => assert_eq!(
            error.backend_kind(),
            Some(fence_core::BackendErrorKind::Rejected),
            "{error}"
        ),
        Ok(bounds) => panic!("foreign settings read as {bounds:?}"),
    }
}

#[tokio::test]
async fn only_the_live_lease_token_writes() {
    let Some(etcd) = support::shared("adm_issued").await else {
        return;
    };
    let fence = etcd.fence_builder().issued_only().build();
    admission::unissued_tokens_are_refused(&fence, &lease_tokens(&etcd), &d("issued")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issued_vectors_agree_with_the_rule() {
    let Some(etcd) = support::shared("adm_vectors").await else {
        return;
    };
    let fence = etcd.fence_builder().issued_only().build();
    admission::issued_vectors_agree_with_the_rule(
        Arc::new(fence),
        Arc::new(lease_tokens(&etcd)),
        IssuerView::LiveLease,
        &Namespace::new("issued_vectors"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_tokens_never_land_under_concurrency() {
    let Some(etcd) = support::shared("adm_forged").await else {
        return;
    };
    let issuer = lease_tokens(&etcd);
    let fence = etcd.fence_builder().issued_only().build();
    admission::forged_tokens_never_land_under_concurrency(Arc::new(fence), &issuer, &d("r")).await;
}

#[tokio::test]
async fn a_holder_whose_lease_ended_is_refused_even_at_the_mark() {
    let Some(etcd) = support::shared("adm_ended").await else {
        return;
    };
    // Two fences: the second's cached state still holds the lease when it ends.
    let (fence, cached) = (
        etcd.fence_builder().issued_only().build(),
        etcd.fence_builder().issued_only().build(),
    );
    let leases = etcd.leases();
    let domain = d("ended");
    let owner = OwnerId::new("worker-a").unwrap();
    let lease = leases
        .acquire(&domain, &owner, Duration::from_secs(60))
        .await
        .unwrap();
    let token = lease.token.get();
    put(&fence, &domain, token, "held").await.unwrap();
    put(&cached, &domain, token, "held again").await.unwrap();
    leases.release(&lease).await.unwrap();
    for (name, store) in [("fresh", &fence), ("cached", &cached)] {
        match put(store, &domain, token, "after the lease").await {
            Err(FenceError::Unissued {
                issuer: IssuerView::LiveLease(None),
                ..
            }) => {}
            other => panic!("{name}: a write after the lease ended: {other:?}"),
        }
    }
    let next = leases
        .acquire(
            &domain,
            &OwnerId::new("worker-b").unwrap(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    match put(&cached, &domain, token, "stale").await {
        Err(FenceError::Unissued {
            issuer: IssuerView::LiveLease(Some(live)),
            ..
        }) => assert_eq!(live, next.token),
        other => panic!("the old token under the next lease: {other:?}"),
    }
    put(&cached, &domain, next.token.get(), "next owner")
        .await
        .unwrap();
    leases.release(&next).await.unwrap();
}

#[tokio::test]
async fn a_forged_mark_is_recovered_by_a_reviewed_rebase() {
    let Some(etcd) = support::shared("adm_rebase").await else {
        return;
    };
    let fence = etcd.fence();
    admission::forged_mark_is_recovered_by_a_reviewed_rebase(
        &fence,
        &fence,
        &etcd.issuer(),
        admission::RebaseFloor::AtOrAboveLastIssued,
        &d("recovered"),
    )
    .await;
}
