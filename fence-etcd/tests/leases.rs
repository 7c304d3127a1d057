//! Leases, the issuer and the guard on real etcd: the shared lease contract; eight contenders
//! taking turns as etcd sees it; a frozen holder that loses its lease and whose late write to
//! a real Redis is fenced (etcd #11456 end to end); tokens across a kill -9 of etcd; a
//! keep-alive cut by a stopped etcd; an operator's revocation; bad input and foreign lock keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fence_conformance::lease::{self, TokenSequence};
use fence_conformance::proxy::TcpProxy;
use fence_conformance::services::{assert_fenced, domain as d, value_of};
use fence_core::{
    BackendErrorKind, Domain, Fence, FenceError, FencedStore, FencedStoreExt, FencingToken,
    LeaseGuard, LeaseLoss, LeaseManager, LeaseOptions, OwnerId, TokenIssuer,
};
use fence_etcd::etcd_client::{Client, LockOptions};
use fence_etcd::{lock_token, Etcd};
use fence_testkit::etcd::{address, shared_endpoints, unique_prefix, EtcdServer};

fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).unwrap()
}

/// The lock key of `domain` under `etcd`'s prefix (the layout the crate documents).
fn lock_key(etcd: &Etcd, domain: &Domain) -> String {
    format!("{}/lease/{}", etcd.prefix(), domain.escaped())
}

/// The lock key's `create_revision` and etcd lease as etcd holds them now.
async fn lock_holder(etcd: &Etcd, domain: &Domain) -> Option<(u64, i64)> {
    let response = etcd
        .client()
        .kv_client()
        .get(lock_key(etcd, domain), None)
        .await
        .unwrap();
    response
        .kvs()
        .first()
        .map(|kv| (u64::try_from(kv.create_revision()).unwrap(), kv.lease()))
}

#[tokio::test]
async fn an_expired_holder_is_fenced_by_the_next_owner() {
    let Some(etcd) = support::shared("lease_story").await else {
        return;
    };
    let (store, leases, issuer) = (etcd.fence(), etcd.leases(), etcd.issuer());
    lease::expired_holder_is_fenced_by_the_next_owner(&store, &leases, Some(&issuer), &d("s7"))
        .await;
}

#[tokio::test]
async fn the_holder_gives_up_first_under_the_drift_bound() {
    let Some(etcd) = support::shared("lease_drift").await else {
        return;
    };
    // etcd reports a lease's remaining time in whole seconds.
    let unit = std::time::Duration::from_secs(1);
    lease::the_holder_gives_up_first_under_the_drift_bound(&etcd.leases(), &d("drift"), unit).await;
}

#[tokio::test]
async fn the_holder_is_reported() {
    let Some(etcd) = support::shared("lease_holder").await else {
        return;
    };
    lease::holder_is_reported(&etcd.leases(), &d("held")).await;
}

#[tokio::test]
async fn ttls_out_of_range_are_refused() {
    let Some(etcd) = support::shared("lease_ttl").await else {
        return;
    };
    lease::ttls_out_of_range_are_refused(&etcd.leases(), &d("ttl")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_have_exactly_one_winner() {
    let Some(etcd) = support::shared("lease_race").await else {
        return;
    };
    let leases = Arc::new(etcd.leases());
    lease::concurrent_acquires_have_exactly_one_winner(leases, &d("c"), TokenSequence::Increasing)
        .await;
}

#[tokio::test]
async fn the_issuer_is_strictly_increasing() {
    let Some(etcd) = support::shared("issuer").await else {
        return;
    };
    lease::issuer_is_strictly_increasing(&etcd.issuer(), &d("issued")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_renews_waits_and_signals_loss() {
    let Some(etcd) = support::shared("lease_guard").await else {
        return;
    };
    lease::guard_renews_waits_and_signals_loss(Arc::new(etcd.leases()), &d("g")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_notified_of_the_release() {
    let Some(etcd) = support::shared("lease_notify").await else {
        return;
    };
    lease::waiting_is_notified(Arc::new(etcd.leases()), &d("n")).await;
}

/// etcd's own Lock API, as `etcdctl lock` and client-go use it: the key `Lock` returns gives
/// the holder's token; the next holder's is greater, and once it claimed, the first holder's
/// late write to etcd's KV is fenced.
#[tokio::test]
async fn etcds_own_lock_api_yields_ordered_tokens() {
    let Some(etcd) = support::shared("lock_api").await else {
        return;
    };
    let mut client = etcd.client().clone();
    let name = format!("{}/locks/jobs", etcd.prefix());
    let domain = d("jobs");
    let store = etcd.fence();
    // A's lease is never kept alive: A is a holder that paused.
    let lease_a = client.lease_grant(2, None).await.unwrap().id();
    let a = client
        .lock(name.clone(), Some(LockOptions::new().with_lease(lease_a)))
        .await
        .unwrap();
    let a_token = lock_token(&client, &domain, a.key()).await.unwrap();
    store.claim(&domain, a_token).await.unwrap();
    store.put(&domain, a_token, "by A").await.unwrap();

    // B waits inside `Lock` until A's lease expires: its client has no request timeout.
    let endpoints = shared_endpoints().expect("the shared etcd");
    let mut waiting = Client::connect(&endpoints, None).await.unwrap();
    let lease_b = client.lease_grant(30, None).await.unwrap().id();
    let b = tokio::time::timeout(
        Duration::from_secs(15),
        waiting.lock(name, Some(LockOptions::new().with_lease(lease_b))),
    )
    .await
    .expect("B gets the lock once A's lease expires")
    .unwrap();
    let b_token = lock_token(&client, &domain, b.key()).await.unwrap();
    assert!(b_token > a_token, "{b_token} after {a_token}");
    store.claim(&domain, b_token).await.unwrap();
    assert_fenced(
        store.put(&domain, a_token, "late A").await,
        a_token.get(),
        b_token.get(),
    );
    let gone = lock_token(&client, &domain, a.key()).await;
    assert!(
        matches!(&gone, Err(e) if e.backend_kind() == Some(BackendErrorKind::NotFound)),
        "{gone:?}"
    );
    client.unlock(b.key()).await.unwrap();
    client.lease_revoke(lease_b).await.unwrap();
}

/// Eight contenders, three turns each, through guards that wait: while a contender holds,
/// etcd's lock key is its own (its token is the key's `create_revision`) and no other
/// contender holds; tokens grow strictly from holder to holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_contenders_hold_one_at_a_time_with_increasing_tokens() {
    let Some(etcd) = support::shared("contenders").await else {
        return;
    };
    let domain = d("leader");
    let holding = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let (etcd, domain, holding, turns) =
            (etcd.clone(), domain.clone(), holding.clone(), turns.clone());
        tasks.spawn(async move {
            let options = LeaseOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(60));
            for _ in 0..3 {
                let guard = LeaseGuard::acquire(
                    Arc::new(etcd.leases()),
                    &domain,
                    &owner(&format!("c{i}")),
                    options,
                )
                .await
                .unwrap_or_else(|e| panic!("contender {i}: {e}"));
                assert_eq!(
                    holding.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                let (created, _) = lock_holder(&etcd, &domain).await.expect("a lock key");
                assert_eq!(
                    created,
                    guard.token().get(),
                    "etcd's lock key is the holder's"
                );
                turns.lock().unwrap().push(guard.token());
                tokio::time::sleep(Duration::from_millis(30)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let turns = turns.lock().unwrap().clone();
    assert_eq!(turns.len(), 24);
    assert!(
        turns.windows(2).all(|w| w[0] < w[1]),
        "tokens grow from holder to holder: {turns:?}"
    );
}

/// etcd #11456 end to end: worker A holds the lease (through a link a proxy can freeze) and
/// writes to a real Redis; A freezes past its TTL (no keep-alive reaches etcd, its work
/// sleeps); etcd expires the lease; B acquires with a greater token and claims Redis; A's
/// guard has signalled the loss; A wakes up and its write, with its old token, is fenced by
/// Redis itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_holder_loses_its_lease_and_its_late_write_is_fenced_by_redis() {
    let Some(endpoints) = shared_endpoints() else {
        return;
    };
    let Some(redis) = fence_testkit::redis::shared_fence("etcd_frozen").await else {
        return;
    };
    let upstream: SocketAddr = address(&endpoints[0]).parse().unwrap();
    let link = TcpProxy::start(upstream).await.unwrap();
    let prefix = unique_prefix("frozen");
    let a_etcd = support::connect(&format!("http://{}", link.address()), &prefix).await;
    let b_etcd = support::connect(&endpoints[0], &prefix).await;
    let domain = d("invoices");
    let ttl = Duration::from_secs(3);
    let t0 = Instant::now();
    let at = || format!("{:>6} ms", t0.elapsed().as_millis());

    let a = LeaseGuard::acquire(
        Arc::new(a_etcd.leases()),
        &domain,
        &owner("worker-a"),
        LeaseOptions::new(ttl),
    )
    .await
    .unwrap();
    let a_token = a.token();
    redis.claim(&domain, a_token).await.unwrap();
    redis.put(&domain, a_token, "by A").await.unwrap();
    println!(
        "{} A holds the etcd lease with token {a_token} and writes to Redis",
        at()
    );

    link.hold();
    println!("{} A freezes: nothing it sends reaches etcd", at());
    let a_lost = tokio::spawn(async move {
        let reason = a.lost().await;
        (a, reason, Instant::now())
    });

    let b = LeaseGuard::acquire(
        Arc::new(b_etcd.leases()),
        &domain,
        &owner("worker-b"),
        LeaseOptions::new(ttl).wait(Duration::from_secs(20)),
    )
    .await
    .unwrap();
    let b_acquired = Instant::now();
    assert!(b.token() > a_token, "{} after {a_token}", b.token());
    redis.claim(&domain, b.token()).await.unwrap();
    redis.put(&domain, b.token(), "by B").await.unwrap();
    println!(
        "{} etcd expired A's lease; B acquires with token {} and claims Redis",
        at(),
        b.token()
    );

    let (a, reason, lost_at) = tokio::time::timeout(Duration::from_secs(5), a_lost)
        .await
        .expect("A's guard signals its loss")
        .unwrap();
    assert_eq!(reason, LeaseLoss::Expired);
    assert!(a.is_lost());
    println!(
        "{} A's guard had signalled `{reason}` {} ms {} B acquired",
        at(),
        lost_at
            .max(b_acquired)
            .duration_since(lost_at.min(b_acquired))
            .as_millis(),
        if lost_at <= b_acquired {
            "before"
        } else {
            "after"
        }
    );

    link.forward();
    let late = redis.put(&domain, a_token, "zombie write by A").await;
    println!(
        "{} A wakes up and writes with token {a_token}: {late:?}",
        at()
    );
    assert_fenced(late, a_token.get(), b.token().get());
    assert_eq!(value_of(&redis, &domain).await.as_deref(), Some("by B"));
    let renewed = a_etcd.leases().renew(&a.lease(), ttl).await;
    assert!(
        matches!(renewed, Err(FenceError::LeaseLost { .. })),
        "{renewed:?}"
    );
    drop(a);
    b.release().await.unwrap();
}

#[tokio::test]
async fn tokens_keep_growing_across_a_kill_9_of_etcd() {
    let Some(server) = EtcdServer::start("restart") else {
        return;
    };
    let etcd = support::connect(&server.endpoint(), "/restart").await;
    let domain = d("durable");
    let mut last = FencingToken::MIN;
    for _ in 0..5 {
        last = etcd.issuer().issue(&domain).await.unwrap();
    }
    let held = etcd
        .leases()
        .acquire(&domain, &owner("a"), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(held.token > last);

    server.kill_and_restart();
    let etcd = support::connect(&server.endpoint(), "/restart").await;
    let issued = etcd.issuer().issue(&domain).await.unwrap();
    assert!(
        issued > held.token,
        "{issued} after {} before the crash",
        held.token
    );
    // The lease survived the crash: another owner waits, the holder can still release.
    let other = etcd
        .leases()
        .acquire(&domain, &owner("b"), Duration::from_secs(5))
        .await;
    assert!(
        matches!(other, Err(FenceError::LeaseHeld { .. })),
        "{other:?}"
    );
    etcd.leases().release(&held).await.unwrap();
    let next = etcd
        .leases()
        .acquire(&domain, &owner("b"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(next.token > issued, "{} after {issued}", next.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_etcd_is_signalled_as_loss_within_the_ttl() {
    let Some(server) = EtcdServer::start("stopped") else {
        return;
    };
    let etcd = support::connect(&server.endpoint(), "/stopped").await;
    let ttl = Duration::from_secs(3);
    let guard = LeaseGuard::acquire(
        Arc::new(etcd.leases()),
        &d("k"),
        &owner("a"),
        LeaseOptions::new(ttl),
    )
    .await
    .unwrap();
    let renewed_until = guard.lease().valid_until;
    server.kill();
    let stopped = Instant::now();
    let reason = tokio::time::timeout(ttl + Duration::from_secs(1), guard.lost())
        .await
        .expect("the loss is signalled within the TTL");
    assert_eq!(reason, LeaseLoss::Expired);
    let signalled = Instant::now();
    assert!(
        signalled.duration_since(stopped) <= ttl + Duration::from_secs(1),
        "signalled {:?} after etcd stopped",
        signalled.duration_since(stopped)
    );
    // Not before the lease's end by the holder's clock: a failed renewal alone is no loss.
    let last = guard.lease().valid_until;
    assert!(last >= renewed_until);
    assert!(
        signalled >= last,
        "signalled {:?} early",
        last.duration_since(signalled)
    );
}

/// etcd renews to the TTL it granted: a renewal asking for more must not report more, or the
/// holder would believe in a lease another owner already holds.
#[tokio::test]
async fn a_renewal_never_reports_more_than_etcd_granted() {
    let Some(etcd) = support::shared("renew_ttl").await else {
        return;
    };
    let (leases, domain) = (etcd.leases(), d("t"));
    let granted = Duration::from_secs(3);
    let lease = leases.acquire(&domain, &owner("a"), granted).await.unwrap();
    let renewed = leases.renew(&lease, Duration::from_secs(60)).await.unwrap();
    assert!(
        renewed.valid_until <= Instant::now() + granted,
        "a renewal reported {:?} left of a {granted:?} lease",
        renewed
            .valid_until
            .saturating_duration_since(Instant::now())
    );
    let b = LeaseGuard::acquire(
        Arc::new(etcd.leases()),
        &domain,
        &owner("b"),
        LeaseOptions::new(granted).wait(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    assert!(
        !renewed.is_valid(),
        "B holds while A's renewed lease still looks valid"
    );
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_revoking_the_etcd_lease_is_signalled_and_the_next_token_is_greater() {
    let Some(etcd) = support::shared("revoked").await else {
        return;
    };
    let domain = d("r");
    let ttl = Duration::from_secs(3);
    let guard = LeaseGuard::acquire(
        Arc::new(etcd.leases()),
        &domain,
        &owner("a"),
        LeaseOptions::new(ttl),
    )
    .await
    .unwrap();
    let (_, etcd_lease) = lock_holder(&etcd, &domain).await.expect("the lock key");
    // `etcdctl lease revoke`: the lock key goes with the lease.
    etcd.client()
        .lease_client()
        .revoke(etcd_lease)
        .await
        .unwrap();
    let reason = tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("the revocation is signalled within the TTL");
    assert_eq!(reason, LeaseLoss::Refused);
    let next = etcd
        .leases()
        .acquire(&domain, &owner("b"), ttl)
        .await
        .unwrap();
    assert!(next.token > guard.token());
}

#[tokio::test]
async fn bad_input_and_foreign_lock_keys_fail_closed() {
    let Some(etcd) = support::shared("bad_input").await else {
        return;
    };
    let leases = etcd.leases();
    // Refused before any I/O: through a client whose endpoint is down, still `InvalidInput`.
    let down = support::connect("http://127.0.0.1:1", "/down").await;
    for ttl in [Duration::ZERO, Duration::from_secs(9_000_000_001)] {
        let refused = down.leases().acquire(&d("ttl"), &owner("a"), ttl).await;
        assert!(
            matches!(refused, Err(FenceError::InvalidInput(_))),
            "{ttl:?}: {refused:?}"
        );
    }

    // Another tool's data at a lock key, and a key with Fence's format but no lease (it would
    // never expire): refused, and left as they were.
    let mut kv = etcd.client().kv_client();
    let foreign = d("foreign");
    kv.put(lock_key(&etcd, &foreign), "someone else's lock", None)
        .await
        .unwrap();
    let no_lease = d("no-lease");
    kv.put(lock_key(&etcd, &no_lease), "fence-lease/1 a", None)
        .await
        .unwrap();
    for domain in [&foreign, &no_lease] {
        let refused = leases
            .acquire(domain, &owner("a"), Duration::from_secs(5))
            .await;
        assert!(
            matches!(refused, Err(FenceError::CorruptState { .. })),
            "{domain}: {refused:?}"
        );
        assert!(refused.unwrap_err().to_string().contains(domain.as_str()));
    }
    let kept = kv.get(lock_key(&etcd, &foreign), None).await.unwrap();
    assert_eq!(kept.kvs()[0].value(), b"someone else's lock");

    // Foreign data in a domain's store folder fails closed too.
    let store = etcd.fence();
    let corrupt = d("corrupt");
    kv.put(
        format!("{}/store/corrupt/mark", etcd.prefix()),
        "not a token",
        None,
    )
    .await
    .unwrap();
    let read = store.read(&corrupt).await;
    assert!(
        matches!(read, Err(FenceError::CorruptState { .. })),
        "{read:?}"
    );
    let write = store.put(&corrupt, FencingToken::MAX, "v").await;
    assert!(
        matches!(write, Err(FenceError::CorruptState { .. })),
        "{write:?}"
    );

    // An endpoint where nothing listens: a typed, retryable error, not a hang.
    let started = Instant::now();
    let refused = down
        .leases()
        .acquire(&d("x"), &owner("a"), Duration::from_secs(5))
        .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    match refused {
        Err(error @ FenceError::Backend { .. }) => {
            assert_eq!(
                error.backend_kind(),
                Some(BackendErrorKind::Unavailable),
                "{error}"
            );
            assert!(error.is_retryable());
        }
        other => panic!("an unreachable endpoint: {other:?}"),
    }
    let issued = down.issuer().issue(&d("x")).await;
    assert!(issued.is_err_and(|e| e.is_retryable()));
}

#[tokio::test]
async fn a_refused_login_is_permission_denied() {
    let Some(server) = EtcdServer::start("auth") else {
        return;
    };
    let admin = support::connect(&server.endpoint(), "/auth").await;
    let mut client = admin.client().clone();
    client
        .user_add("root", "right-password", None)
        .await
        .unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();

    let wrong = support::options().with_user("root", "wrong-password");
    let refused = Etcd::connect(&[server.endpoint()], Some(wrong), "/auth").await;
    match refused {
        Err(error) => {
            assert_eq!(
                error.backend_kind(),
                Some(BackendErrorKind::PermissionDenied),
                "{error}"
            );
            assert!(!error.is_retryable());
            assert!(!format!("{error} {error:?}").contains("wrong-password"));
        }
        Ok(etcd) => panic!("a wrong password was accepted: {etcd:?}"),
    }
    let right = support::options().with_user("root", "right-password");
    let etcd = Etcd::connect(&[server.endpoint()], Some(right), "/auth")
        .await
        .unwrap();
    // The client's options hold the password: `Debug` shows none of them.
    assert!(!format!("{etcd:?} {:?}", etcd.fence()).contains("right-password"));
    etcd.leases()
        .acquire(&d("authorized"), &owner("a"), Duration::from_secs(5))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_retired_domain_leaves_no_keys() {
    let Some(etcd) = support::shared("retire").await else {
        return;
    };
    let domain = d("retired");
    // The issuer's key goes with the domain too.
    etcd.issuer().issue(&domain).await.unwrap();
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &etcd.fence(),
        &etcd.fence(),
        Some(&etcd.leases()),
        &domain,
    )
    .await;
    let left = etcd
        .client()
        .kv_client()
        .get(
            etcd.prefix(),
            Some(fence_etcd::etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let keys: Vec<String> = left
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    assert!(
        keys.iter()
            .all(|key| !key.contains("/retired/") && !key.ends_with("/retired")),
        "keys outlived the domain: {keys:?}"
    );
    assert!(
        keys.iter().any(|key| key.contains("/retired-kept/")),
        "the other domain's keys went too: {keys:?}"
    );
}
