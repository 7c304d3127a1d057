//! Leases and the issuer on DynamoDB (moto in the test command): the shared lease contract;
//! expiry judged by a contender that saw the same record version for the lease's duration;
//! the counter floored at the mark; a stalled holder's write refused by the item's condition.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_conformance::lease::{self, TokenSequence};
use fence_conformance::services::{assert_fenced, domain as d, put};
use fence_core::{Domain, FenceError, LeaseManager, OwnerId, TokenIssuer};
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_dynamodb::DynamoDb;
use fence_testkit::dynamodb::{another_client, raw_item, shared};

fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).unwrap()
}

#[tokio::test]
async fn an_expired_holder_is_fenced_by_the_next_owner() {
    let Some(dynamodb) = shared("lease_story").await else {
        return;
    };
    // B is another process: it judges A's lease from its own sightings.
    let other = another_client(&dynamodb);
    let (store, issuer) = (dynamodb.fence(), dynamodb.issuer());
    let leases = SplitLeases {
        a: dynamodb.leases(),
        b: other.leases(),
    };
    lease::expired_holder_is_fenced_by_the_next_owner(&store, &leases, Some(&issuer), &d("s7"))
        .await;
}

/// A's calls through one client and everyone else's through another, as two processes.
#[derive(Debug)]
struct SplitLeases {
    a: fence_core::Observed<fence_dynamodb::DynamoDbLeases>,
    b: fence_core::Observed<fence_dynamodb::DynamoDbLeases>,
}

#[async_trait::async_trait]
impl LeaseManager for SplitLeases {
    fn backend(&self) -> &'static str {
        "dynamodb (two clients)"
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<fence_core::Lease, FenceError> {
        self.side(owner.as_str()).acquire(domain, owner, ttl).await
    }

    async fn renew(
        &self,
        lease: &fence_core::Lease,
        ttl: Duration,
    ) -> Result<fence_core::Lease, FenceError> {
        self.side(lease.owner.as_str()).renew(lease, ttl).await
    }

    async fn release(&self, lease: &fence_core::Lease) -> Result<(), FenceError> {
        self.side(lease.owner.as_str()).release(lease).await
    }
}

impl SplitLeases {
    fn side(&self, owner: &str) -> &fence_core::Observed<fence_dynamodb::DynamoDbLeases> {
        if owner == "worker-a" {
            &self.a
        } else {
            &self.b
        }
    }
}

#[tokio::test]
async fn the_holder_gives_up_first_under_the_drift_bound() {
    let Some(dynamodb) = shared("lease_drift").await else {
        return;
    };
    // Reported in whole milliseconds.
    lease::the_holder_gives_up_first_under_the_drift_bound(
        &dynamodb.leases(),
        &d("drift"),
        Duration::from_millis(1),
    )
    .await;
}

#[tokio::test]
async fn the_holder_is_reported() {
    let Some(dynamodb) = shared("lease_holder").await else {
        return;
    };
    lease::holder_is_reported(&dynamodb.leases(), &d("held")).await;
}

#[tokio::test]
async fn ttls_out_of_range_are_refused() {
    let Some(dynamodb) = shared("lease_ttl").await else {
        return;
    };
    lease::ttls_out_of_range_are_refused(&dynamodb.leases(), &d("ttl")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_have_exactly_one_winner() {
    let Some(dynamodb) = shared("lease_race").await else {
        return;
    };
    lease::concurrent_acquires_have_exactly_one_winner(
        Arc::new(dynamodb.leases()),
        &d("c"),
        TokenSequence::Consecutive,
    )
    .await;
}

#[tokio::test]
async fn the_issuer_is_strictly_increasing() {
    let Some(dynamodb) = shared("issuer").await else {
        return;
    };
    lease::issuer_is_strictly_increasing(&dynamodb.issuer(), &d("issued")).await;
}

/// Sets or removes the domain's counter attribute, going around Fence.
async fn set_counter(dynamodb: DynamoDb, domain: Domain, last: Option<u64>) {
    let request = dynamodb
        .client()
        .update_item()
        .table_name(dynamodb.table())
        .key("pk", AttributeValue::S(dynamodb.item_key(&domain)))
        .set_expression_attribute_names(Some(HashMap::from([("#c".into(), "ctr".into())])));
    let request = match last {
        None => request.update_expression("REMOVE #c"),
        Some(last) => request
            .update_expression("SET #c = :c")
            .expression_attribute_values(":c", AttributeValue::N(last.to_string())),
    };
    request.send().await.unwrap();
}

#[tokio::test]
async fn the_issuer_is_floored_at_the_mark_and_exhausts_cleanly() {
    let Some(dynamodb) = shared("issuer_floor").await else {
        return;
    };
    let domain = d("floor");
    let set = {
        let (dynamodb, domain) = (dynamodb.clone(), domain.clone());
        move |last: Option<u64>| -> fence_core::BoxFuture<'static, ()> {
            Box::pin(set_counter(dynamodb.clone(), domain.clone(), last))
        }
    };
    lease::issuer_is_floored_at_the_mark_and_exhausts_cleanly(
        &dynamodb.fence(),
        &dynamodb.issuer(),
        &dynamodb.leases(),
        &domain,
        &set,
    )
    .await;
    // The exhausted counter was left as it was.
    let item = raw_item(&dynamodb, &dynamodb.item_key(&domain)).await;
    assert_eq!(
        item.and_then(|i| i.get("ctr").cloned()),
        Some(AttributeValue::N(u64::MAX.to_string()))
    );
}

#[tokio::test]
async fn the_guard_renews_waits_and_signals_loss() {
    let Some(dynamodb) = shared("lease_guard").await else {
        return;
    };
    lease::guard_renews_waits_and_signals_loss(Arc::new(dynamodb.leases()), &d("g")).await;
}

/// A contender never takes over a lease its holder keeps renewing, however long it watches:
/// each renewal changes the record version it waits on.
#[tokio::test]
async fn a_renewed_lease_is_never_taken_over() {
    let Some(dynamodb) = shared("lease_renewed").await else {
        return;
    };
    let (holder, contender) = (dynamodb.leases(), another_client(&dynamodb).leases());
    let domain = d("renewed");
    let ttl = Duration::from_millis(1500);
    let mut lease = holder
        .acquire(&domain, &owner("holder"), ttl)
        .await
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < ttl * 3 {
        match contender.acquire(&domain, &owner("contender"), ttl).await {
            Err(FenceError::LeaseHeld { .. }) => {}
            other => panic!("the contender while the holder renews: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if lease.valid_until.saturating_duration_since(Instant::now()) < ttl / 2 {
            lease = holder.renew(&lease, ttl).await.unwrap();
        }
    }
    // Once the holder stops renewing, the contender takes over after one whole TTL of
    // sightings, never while the holder still believes in its lease; the old holder's write,
    // decided on what its own client last saw, is refused by DynamoDB's condition.
    let stalled = another_client(&dynamodb).fence();
    put(&stalled, &domain, lease.token.get(), "holder")
        .await
        .unwrap();
    let (next, sent) = loop {
        let sent = Instant::now();
        match contender.acquire(&domain, &owner("contender"), ttl).await {
            Ok(next) => break (next, sent),
            Err(FenceError::LeaseHeld { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(other) => panic!("{other}"),
        }
    };
    // The grant was sent after the holder's own count of its lease had run out.
    assert!(
        sent >= lease.valid_until,
        "taken over {:?} before the holder's lease ended",
        lease.valid_until - sent
    );
    assert!(next.token > lease.token);
    let store = dynamodb.fence();
    put(&store, &domain, next.token.get(), "contender")
        .await
        .unwrap();
    assert_fenced(
        put(&stalled, &domain, lease.token.get(), "stalled").await,
        lease.token.get(),
        next.token.get(),
    );
    match holder.renew(&lease, ttl).await {
        Err(FenceError::LeaseLost { .. }) => {}
        other => panic!("the old holder renews: {other:?}"),
    }
}

/// A lease item Fence did not write is refused, not guessed at, and left alone.
#[tokio::test]
async fn a_foreign_lease_item_fails_closed() {
    let Some(dynamodb) = shared("lease_foreign").await else {
        return;
    };
    let domain = d("foreign");
    dynamodb
        .client()
        .put_item()
        .table_name(dynamodb.table())
        .item("pk", AttributeValue::S(dynamodb.item_key(&domain)))
        .item("owner", AttributeValue::S("someone".into()))
        .item("leaseDuration", AttributeValue::S("10s".into()))
        .send()
        .await
        .unwrap();
    match dynamodb
        .leases()
        .acquire(&domain, &owner("a"), Duration::from_secs(5))
        .await
    {
        Err(FenceError::CorruptState { domain: named, .. }) => assert_eq!(named, domain),
        other => panic!("acquire on a foreign item: {other:?}"),
    }
    match dynamodb.issuer().issue(&domain).await {
        Err(FenceError::CorruptState { .. }) => {}
        other => panic!("issue on a foreign item: {other:?}"),
    }
}

/// The same owner re-acquires its own lease at once, with a greater token (after an
/// acquisition whose answer was lost, say), and the earlier token is then stale.
#[tokio::test]
async fn the_same_owner_re_acquires_at_once_with_a_greater_token() {
    let Some(dynamodb) = shared("lease_again").await else {
        return;
    };
    let (leases, domain) = (dynamodb.leases(), d("again"));
    let first = leases
        .acquire(&domain, &owner("a"), Duration::from_secs(60))
        .await
        .unwrap();
    // Another process of the same owner: no sighting to wait on.
    let again = another_client(&dynamodb)
        .leases()
        .acquire(&domain, &owner("a"), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(again.token > first.token, "{again:?} after {first:?}");
    match leases.renew(&first, Duration::from_secs(60)).await {
        Err(FenceError::LeaseLost { token, .. }) => assert_eq!(token, first.token),
        other => panic!("renewing the earlier lease: {other:?}"),
    }
    match leases
        .acquire(&domain, &owner("b"), Duration::from_secs(60))
        .await
    {
        Err(FenceError::LeaseHeld { .. }) => {}
        other => panic!("another owner: {other:?}"),
    }
}

/// The stored duration of a lease never shrinks: a contender counts it from when it saw a
/// renewal, while a holder that lost the renewal's answer still counts the one before. A
/// shorter renewal (or the same owner re-acquiring for less) keeps the longer stored duration,
/// and the holder counts the shorter one it asked for.
#[tokio::test]
async fn a_lease_is_never_stored_shorter_than_a_holder_may_count() {
    let Some(dynamodb) = shared("lease_shorter").await else {
        return;
    };
    let (leases, domain) = (dynamodb.leases(), d("shorter"));
    let stored_ttl = || async {
        match raw_item(&dynamodb, &dynamodb.item_key(&domain))
            .await
            .and_then(|i| i.get("ttl").cloned())
        {
            Some(AttributeValue::N(ms)) => ms.parse::<u64>().unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let lease = leases
        .acquire(&domain, &owner("a"), Duration::from_secs(60))
        .await
        .unwrap();
    let shorter = leases.renew(&lease, Duration::from_secs(5)).await.unwrap();
    assert!(shorter.valid_until <= Instant::now() + Duration::from_secs(5));
    assert_eq!(
        stored_ttl().await,
        60_000,
        "a shorter renewal kept the stored duration"
    );
    // The same owner in another process re-acquires for less: the longer duration stays.
    let again = another_client(&dynamodb)
        .leases()
        .acquire(&domain, &owner("a"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(again.token > lease.token);
    assert_eq!(
        stored_ttl().await,
        60_000,
        "a shorter re-acquisition kept the stored duration"
    );
    leases.renew(&again, Duration::from_secs(90)).await.unwrap();
    assert_eq!(stored_ttl().await, 90_000, "a longer renewal is stored");
    // Renewing twice is harmless (a retry after a lost answer).
    leases.renew(&again, Duration::from_secs(90)).await.unwrap();
    leases.release(&again).await.unwrap();
}

#[tokio::test]
async fn retirement_removes_the_domain_and_nothing_else() {
    let Some(dynamodb) = shared("retire").await else {
        return;
    };
    let fence = dynamodb.fence();
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &fence,
        &fence,
        Some(&dynamodb.leases()),
        &d("retired"),
    )
    .await;
}
