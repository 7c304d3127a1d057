//! Issued-only acceptance and the bounded step on real Redis, standalone and Cluster: the
//! checks run in the fence's own script, next to the domain's token sequence.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::sync::Arc;

use fence_conformance::services::{domain, unavailable};
use fence_conformance::{admission, Namespace};
use fence_core::{BoundsConfig, Fence, FenceError, FencingToken, IssuerView, Observed};
use fence_redis::{FencedScript, RedisFence, RedisFenceBuilder, ScriptCall};
use fence_testkit::redis::{shared_cluster, shared_url, unique_prefix};

const STEP: u64 = 1000;

async fn on_servers(
    test: &str,
    configure: fn(RedisFenceBuilder) -> RedisFenceBuilder,
) -> Vec<Observed<RedisFence>> {
    let (Some(url), Some(nodes)) = (shared_url(), shared_cluster()) else {
        unavailable("Redis (standalone and Cluster)");
        return Vec::new();
    };
    let standalone = RedisFence::builder().url(url);
    let cluster = RedisFence::builder().cluster(nodes);
    let mut fences = Vec::new();
    for builder in [standalone, cluster] {
        let fence = configure(builder.prefix(unique_prefix(test)))
            .connect()
            .await
            .expect("connect to the shared Redis");
        fences.push(fence);
    }
    fences
}

/// A fence on the shared standalone Redis under a fresh prefix, and the server's URL.
async fn standalone(test: &str) -> Option<(Observed<RedisFence>, String)> {
    let url = shared_url()?;
    let fence = RedisFence::builder()
        .url(url.clone())
        .prefix(unique_prefix(test))
        .connect()
        .await
        .expect("connect to the shared Redis");
    Some((fence, url))
}

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let step = |b: RedisFenceBuilder| b.max_token_step(NonZeroU64::new(STEP).unwrap());
    for fence in on_servers("step", step).await {
        admission::runaway_tokens_are_refused(&fence, &domain("step"), STEP).await;
    }
}

/// A domain's own settings bind a client built without any, on standalone Redis and on a
/// Cluster: the step and issued-only are stored by one client and obeyed by another,
/// unconfigured one (writes and claims by the conformance scenarios, a fenced user script
/// too); removing them lets the same token through. Settings Redis holds that are not
/// Fence's fail the domain's writes closed.
#[tokio::test]
async fn domain_settings_bind_a_client_built_without_them() {
    let (Some(url), Some(nodes)) = (shared_url(), shared_cluster()) else {
        unavailable("Redis (standalone and Cluster)");
        return;
    };
    let servers: [Box<dyn Fn() -> RedisFenceBuilder>; 2] = [
        Box::new(move || RedisFence::builder().url(url.clone())),
        Box::new(move || RedisFence::builder().cluster(nodes.clone())),
    ];
    for server in servers {
        let prefix = unique_prefix("domain-bounds");
        let client = || async { server().prefix(prefix.clone()).connect().await.unwrap() };
        let (operator, plain) = (client().await, client().await);
        let step = NonZeroU64::new(STEP);
        let (stepped, issued) = (domain("step"), domain("issued"));
        assert_eq!(
            plain.domain_bounds(&stepped).await.unwrap(),
            BoundsConfig::NONE
        );
        operator
            .set_domain_bounds(&stepped, BoundsConfig::new(step, false))
            .await
            .unwrap();
        assert_eq!(
            plain.domain_bounds(&stepped).await.unwrap(),
            BoundsConfig::new(step, false)
        );
        admission::runaway_tokens_are_refused_by_the_resource(&plain, &stepped, STEP).await;
        let script = FencedScript::new("return 'ran'");
        match plain
            .run_script(
                &script,
                &ScriptCall::new(stepped.clone(), FencingToken::MAX),
            )
            .await
        {
            Err(FenceError::TokenTooFar { max_step, .. }) => assert_eq!(max_step.get(), STEP),
            other => panic!("a fenced script with u64::MAX: {other:?}"),
        }

        operator
            .set_domain_bounds(&issued, BoundsConfig::new(None, true))
            .await
            .unwrap();
        admission::unissued_tokens_are_refused_by_the_resource(&plain, &plain.issuer(), &issued)
            .await;

        // The same token passes once the setting is gone: the setting refused it.
        operator
            .set_domain_bounds(&stepped, BoundsConfig::NONE)
            .await
            .unwrap();
        plain
            .claim(&stepped, FencingToken::MAX)
            .await
            .expect("no setting: u64::MAX is claimed");
    }
}

#[tokio::test]
async fn foreign_domain_settings_fail_closed() {
    let Some((fence, url)) = standalone("foreign-bounds").await else {
        return;
    };
    let d = domain("x");
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{}:{{x}}:bounds", fence.prefix());
    for foreign in [
        vec![("max_step", "0"), ("issued_only", "0")],
        vec![("max_step", "+5"), ("issued_only", "0")],
        vec![("issued_only", "yes")],
        vec![("max_step", "5")],
        vec![("something", "else")],
        // Another type altogether: a string.
        vec![],
    ] {
        let mut reset = redis::cmd("DEL");
        let _: () = reset.arg(&key).query_async(&mut conn).await.unwrap();
        let mut plant = if foreign.is_empty() {
            redis::cmd("SET")
        } else {
            redis::cmd("HSET")
        };
        if foreign.is_empty() {
            plant.arg(&key).arg("max_step=5");
        } else {
            plant.arg(&key).arg(&foreign);
        }
        let _: () = plant.query_async(&mut conn).await.unwrap();
        match fence.claim(&d, FencingToken::MIN).await {
            Err(FenceError::CorruptState { domain, .. }) => assert_eq!(domain, d),
            other => panic!("a claim under foreign settings {foreign:?}: {other:?}"),
        }
        match fence.domain_bounds(&d).await {
            Err(FenceError::CorruptState { domain, .. }) => assert_eq!(domain, d),
            other => panic!("foreign settings {foreign:?} read as {other:?}"),
        }
    }
}

#[tokio::test]
async fn unissued_tokens_are_refused() {
    for fence in on_servers("issued", RedisFenceBuilder::issued_only).await {
        admission::unissued_tokens_are_refused(&fence, &fence.issuer(), &domain("issued")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issued_vectors_agree_with_the_rule() {
    for fence in on_servers("issued_vectors", RedisFenceBuilder::issued_only).await {
        let issuer = Arc::new(fence.issuer());
        admission::issued_vectors_agree_with_the_rule(
            Arc::new(fence),
            issuer,
            IssuerView::IssuedUpTo,
            &Namespace::new("issued_vectors"),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_tokens_never_land_under_concurrency() {
    for fence in on_servers("forged", RedisFenceBuilder::issued_only).await {
        let issuer = fence.issuer();
        admission::forged_tokens_never_land_under_concurrency(
            Arc::new(fence),
            &issuer,
            &domain("r"),
        )
        .await;
    }
}

#[tokio::test]
async fn lease_tokens_are_issued_tokens() {
    for fence in on_servers("leased", RedisFenceBuilder::issued_only).await {
        let leases = fence.leases();
        let d = domain("leased");
        let owner = fence_core::OwnerId::new("worker-a").unwrap();
        let lease = fence_core::LeaseManager::acquire(
            &leases,
            &d,
            &owner,
            std::time::Duration::from_secs(30),
        )
        .await
        .unwrap();
        let accepted =
            fence_conformance::services::put(&fence, &d, lease.token.get(), "leased").await;
        assert!(accepted.is_ok(), "the lease's token: {accepted:?}");
        let forged =
            fence_conformance::services::put(&fence, &d, lease.token.get() + 1, "forged").await;
        assert!(
            matches!(forged, Err(fence_core::FenceError::Unissued { .. })),
            "a token above the lease's: {forged:?}"
        );
    }
}

#[tokio::test]
async fn a_forged_mark_is_recovered_by_a_reviewed_rebase() {
    for fence in on_servers("rebase", |b| b).await {
        let issuer = fence.issuer();
        admission::forged_mark_is_recovered_by_a_reviewed_rebase(
            &fence,
            &fence,
            &issuer,
            admission::RebaseFloor::LastIssued,
            &domain("recovered"),
        )
        .await;
    }
}

/// A sequence lost to an unclean restart or an old snapshot (its mark kept): every token is
/// refused until the issuer issues again, floored above the mark it sees.
#[tokio::test]
async fn a_lost_sequence_refuses_tokens_until_the_issuer_reconciles() {
    let Some(url) = shared_url() else {
        unavailable("Redis");
        return;
    };
    let fence = RedisFence::builder()
        .url(url.clone())
        .prefix(unique_prefix("lost-seq"))
        .issued_only()
        .connect()
        .await
        .unwrap();
    let d = domain("lost");
    let lose = lose_sequence(&url, &fence, &d);
    admission::lost_issuer_state_refuses_tokens_until_reconciled(&fence, &fence.issuer(), &d, lose)
        .await;
}

#[tokio::test]
async fn a_rebase_without_the_sequence_needs_a_declaration() {
    let Some((fence, url)) = standalone("rebase-lost").await else {
        return;
    };
    let d = domain("lost");
    let lose = lose_sequence(&url, &fence, &d);
    admission::rebase_without_issuer_state_needs_a_declaration(
        &fence,
        &fence,
        &fence.issuer(),
        &d,
        lose,
    )
    .await;
}

/// Deletes the domain's token sequence, as a restore from an older snapshot would lose it.
async fn lose_sequence(url: &str, fence: &Observed<RedisFence>, d: &fence_core::Domain) {
    use fence_redis::redis::AsyncCommands;
    let seq = format!("{}:{{{}}}:seq", fence.prefix(), d.escaped());
    let mut raw = fence_testkit::redis::raw(url).await;
    let deleted: u32 = raw.del(&seq).await.unwrap();
    assert_eq!(deleted, 1, "the sequence key {seq}");
}
