//! The relay's contract on a real outbox backend, run by each backend's tests: exactly-once
//! observed delivery in order across a relay crash, a failing head holding back its domain
//! only, dead letters, stuck sinks, a paused relay fenced by its successor, and concurrency
//! within limits. Each scenario panics (failing the calling test) on a breach.
// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::{Domain, FenceError, FencingToken};
use fence_outbox::{
    EntryStatus, OutboxEntry, OutboxError, OutboxStore, Relay, RelayConfig, RelayHandle,
    RelayReport, Sink,
};
use tokio::sync::{watch, Notify};

use crate::relay_kit::{
    all_settled, assert_exactly_once_in_order, delivered, fast_relay, webhook,
    CrashAfterDeliveries, OlderRelayBeginsFirst, PausingSink,
};
use crate::seeded::{self, Rng};
use crate::services::{domain, token};
use crate::webhook::WebhookServer;

/// An outbox backend as the relay scenarios drive it.
#[async_trait]
pub trait OutboxUnderTest: Send + Sync {
    /// Marks the order `domain` paid (a state change of the backend's own) and records one
    /// `send-receipt-email` effect to `url` with `payload`, in one fenced transition; how many
    /// entries it recorded (0 when `op_id` had run before).
    async fn pay(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &str,
        url: &str,
        payload: &str,
    ) -> Result<usize, OutboxError>;

    /// Every entry of `domain` still kept, in order.
    async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError>;

    /// The dead letters of `domain`.
    async fn dead_letters(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError>;

    /// Discards dead letter `seq` of `domain`; false when it is not one.
    async fn discard_dead_letter(&self, domain: &Domain, seq: u64) -> Result<bool, OutboxError>;

    /// A relay of the outbox's partition 0 delivering to `sink`, leased from the backend.
    fn relay(&self, sink: Arc<dyn Sink>, config: RelayConfig) -> Result<Relay, OutboxError>;

    /// The store a relay of partition 0 works on (the relay's own fence: its marks).
    fn store(&self) -> Result<Arc<dyn OutboxStore>, OutboxError>;

    /// Ends the lease of the test relay group's partition 0 now, as its TTL would.
    async fn expire_relay_lease(&self);

    /// Checks, while the relay still runs, what the backend keeps for a `domain` whose entries
    /// were purged (a hint index it should drop, for instance). Nothing by default.
    async fn check_purged(&self, domain: &Domain) {
        let _ = domain;
    }
}

/// One `#[tokio::test]` per relay scenario (all of them unless listed), each on the outbox
/// `$make(test name)` returns (`None`: a loud skip outside the test command).
#[macro_export]
macro_rules! relay_contract_tests {
    ($make:expr; $($scenario:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $scenario() {
            if let Some(o) = ($make)(stringify!($scenario)).await {
                $crate::relay::$scenario(&o).await;
            }
        }
    )*};
    ($make:expr) => {
        $crate::relay_contract_tests!($make;
            exactly_once_despite_failures_and_a_relay_crash,
            a_failing_head_holds_back_its_domain_only,
            dead_letters_after_the_attempt_limit_and_the_domain_moves_on,
            a_stuck_sink_times_out_and_the_retry_lands_once,
            a_paused_relay_cannot_complete_after_its_successor,
            domains_are_served_concurrently_each_in_order,
            delivered_entries_are_purged_after_the_retention_window_dead_letters_stay,
            relays_under_torture_deliver_each_accepted_effect_once_in_order,
            relay_marks_agree_with_the_rule,
            the_attempt_limit_holds_across_a_handover,
        );
    };
}

fn relay(o: &dyn OutboxUnderTest, sink: Arc<dyn Sink>, config: RelayConfig) -> Relay {
    o.relay(sink, config).expect("valid relay config")
}

/// Waits until `check` holds on the entries of `domains`, or panics after `limit`; reads that
/// fail (a restarting server) are retried until then.
pub async fn wait_for(
    o: &dyn OutboxUnderTest,
    domains: &[Domain],
    limit: Duration,
    check: impl Fn(&[OutboxEntry]) -> bool,
) -> Vec<OutboxEntry> {
    let started = Instant::now();
    loop {
        let mut all = Vec::new();
        let mut failed = None;
        for d in domains {
            match o.entries(d).await {
                Ok(entries) => all.extend(entries),
                Err(error) => failed = Some(error),
            }
        }
        if failed.is_none() && check(&all) {
            return all;
        }
        assert!(
            started.elapsed() < limit,
            "condition not reached within {limit:?}; last error {failed:?}; entries: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Records `per_domain` payments on each of `domains`, alternating failure modes per effect.
async fn record_payments(
    o: &dyn OutboxUnderTest,
    server: &WebhookServer,
    domains: &[Domain],
    per_domain: usize,
) -> usize {
    let mut recorded = 0;
    for (d_index, d) in domains.iter().enumerate() {
        for n in 0..per_domain {
            let path = ["/ok", "/fail/2", "/lost/1", "/fail/1"][(d_index + n) % 4];
            let payload = format!("{}#{n}", d.as_str());
            recorded += o
                .pay(
                    d,
                    token(1),
                    &format!("pay-{n}"),
                    &server.url(path),
                    &payload,
                )
                .await
                .expect("payment recorded");
        }
    }
    recorded
}

/// Twelve payments on three domains with injected failures; relay 1 is killed right after
/// its 5th successful delivery, before its mark; relay 2 takes over once the lease ends. The
/// receiver applies every entry exactly once, in order per domain.
pub async fn exactly_once_despite_failures_and_a_relay_crash(o: &dyn OutboxUnderTest) {
    let server = WebhookServer::start().await;
    let domains: Vec<Domain> = (0..3).map(|i| domain(&format!("order-{i}"))).collect();
    let recorded = record_payments(o, &server, &domains, 4).await;

    // Relay 1 is killed right after its 5th successful delivery, before it can mark it: the
    // receiver has the effect, the outbox does not know.
    let crashed = Arc::new(Notify::new());
    let crashing = Arc::new(CrashAfterDeliveries::new(webhook(), 5, crashed.clone()));
    let first = relay(o, crashing, fast_relay("relay-1")).spawn();
    crashed.notified().await;
    first.abort();
    let after_crash = server.applied().len();

    // Relay 2 must wait for relay 1's lease to expire, then finishes the job.
    let second = relay(o, webhook(), fast_relay("relay-2")).spawn();
    let entries = wait_for(o, &domains, Duration::from_secs(30), |e| {
        e.len() == recorded && all_settled(e)
    })
    .await;
    let report = second.shutdown().await.unwrap();
    assert_eq!(delivered(&entries), recorded, "{entries:#?}");
    assert_exactly_once_in_order(&server, &entries);
    let attempts: u32 = entries.iter().map(OutboxEntry::attempts).sum();
    println!(
        "exactly-once: {recorded} entries; {} applied before relay 1 was killed; {} requests, \
         {attempts} attempts recorded, {} applied (each key once); relay 2: {report:?}",
        after_crash,
        server.total_requests(),
        server.applied().len()
    );
    assert!(
        server.total_requests() > recorded as u64,
        "failures were injected and retried"
    );
    assert!(
        after_crash >= 5,
        "relay 1 delivered at least 5 before it was killed"
    );
    // The kill landed mid-delivery: a delivery the receiver had answered with success was
    // unmarked, so relay 2 sent it again (and the receiver's dedup kept it applied once).
    assert!(
        server.requests_after_success() >= 1,
        "relay 1 must have been killed between a successful delivery and its mark"
    );
}

/// A head entry that keeps failing holds back the entries behind it, and no other domain.
pub async fn a_failing_head_holds_back_its_domain_only(o: &dyn OutboxUnderTest) {
    let server = WebhookServer::start().await;
    let (slow, fast) = (domain("slow"), domain("fast"));
    o.pay(&slow, token(1), "a", &server.url("/fail/4"), "slow-1")
        .await
        .unwrap();
    o.pay(&slow, token(1), "b", &server.url("/ok"), "slow-2")
        .await
        .unwrap();
    o.pay(&fast, token(1), "a", &server.url("/ok"), "fast-1")
        .await
        .unwrap();
    let handle = relay(o, webhook(), fast_relay("relay")).spawn();
    let entries = wait_for(
        o,
        &[slow.clone(), fast.clone()],
        Duration::from_secs(20),
        |e| e.len() == 3 && all_settled(e),
    )
    .await;
    let report = handle.shutdown().await.unwrap();
    let order: Vec<String> = server
        .applied()
        .iter()
        .map(|a| String::from_utf8_lossy(&a.payload).into_owned())
        .collect();
    println!("order: applied {order:?}; relay {report:?}");
    assert_eq!(delivered(&entries), 3);
    let position = |p: &str| order.iter().position(|o| o == p).unwrap();
    assert!(
        position("slow-1") < position("slow-2"),
        "slow-2 waited for slow-1"
    );
    assert!(
        position("fast-1") < position("slow-1"),
        "the fast domain was not held back"
    );
    assert_eq!(report.retried, 4);
    assert_eq!(
        server.requests_after_success(),
        0,
        "nothing is sent again once the receiver answered success"
    );
    assert_eq!(
        entries
            .iter()
            .find(|e| e.payload == "slow-1")
            .unwrap()
            .attempts(),
        5
    );
}

/// An entry that keeps failing is dead-lettered after the attempt limit (a permanent refusal
/// at once) and its domain moves on; an operator lists and discards dead letters.
pub async fn dead_letters_after_the_attempt_limit_and_the_domain_moves_on(o: &dyn OutboxUnderTest) {
    let server = WebhookServer::start().await;
    let d = domain("order-dl");
    o.pay(&d, token(1), "a", &server.url("/always-500"), "doomed")
        .await
        .unwrap();
    o.pay(&d, token(1), "b", &server.url("/reject"), "declined")
        .await
        .unwrap();
    o.pay(&d, token(1), "c", &server.url("/ok"), "fine")
        .await
        .unwrap();
    let config = fast_relay("relay").retry(fence_outbox::RetryPolicy::new(
        3,
        Duration::from_millis(10),
        Duration::from_millis(40),
    ));
    let handle = relay(o, webhook(), config).spawn();
    let entries = wait_for(o, std::slice::from_ref(&d), Duration::from_secs(20), |e| {
        e.len() == 3 && all_settled(e)
    })
    .await;
    let report = handle.shutdown().await.unwrap();
    match &entries[0].status {
        EntryStatus::DeadLettered {
            attempts,
            last_error,
            ..
        } => {
            assert_eq!(*attempts, 3);
            assert!(last_error.contains("500"), "{last_error}");
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
    assert_eq!(
        server.requests_for(entries[0].key.as_str()),
        3,
        "exactly N attempts"
    );
    match &entries[1].status {
        EntryStatus::DeadLettered {
            attempts,
            last_error,
            ..
        } => {
            assert_eq!(*attempts, 1, "a 422 is permanent: no retry");
            assert!(
                last_error.contains("422") && last_error.contains("declined"),
                "{last_error}"
            );
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
    assert!(matches!(entries[2].status, EntryStatus::Delivered { .. }));
    assert_eq!(report.dead_lettered, 2);
    // An operator lists the dead letters and discards one; a delivered entry is not one.
    assert_eq!(o.dead_letters(&d).await.unwrap().len(), 2);
    assert!(o.discard_dead_letter(&d, 1).await.unwrap());
    assert!(!o.discard_dead_letter(&d, 3).await.unwrap());
    let left: Vec<u64> = o.entries(&d).await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(left, vec![2, 3]);
    println!("dead-letter: {:#?}", &entries[..2]);
}

/// The attempt limit holds across a handover: a relay reads an entry with one of its two
/// attempts used, and before its `begin` an older relay starts the second; the relay must
/// dead-letter the entry on the store's count instead of sending a third request (found by
/// fence-model's relay model: the relay judged only the count it had read).
pub async fn the_attempt_limit_holds_across_a_handover(o: &dyn OutboxUnderTest) {
    let server = WebhookServer::start().await;
    let d = domain("order-limit");
    o.pay(&d, token(1), "a", &server.url("/ok"), "at most twice")
        .await
        .unwrap();
    let store = o.store().unwrap();
    store.candidates(0, true).await.unwrap(); // a store that keeps a view refreshes it
                                              // The older relay (token 1) used the first attempt; it failed.
    let older = token(1);
    assert_eq!(store.begin(&d, older, 1).await.unwrap(), Some(1));
    let retry = fence_outbox::Settlement::Retry {
        error: "HTTP 503".into(),
    };
    assert!(store.settle(&d, older, 1, &retry).await.unwrap());
    let racing = Arc::new(OlderRelayBeginsFirst::new(store, older));
    let config = fast_relay("relay").retry(fence_outbox::RetryPolicy::new(
        2,
        Duration::from_millis(10),
        Duration::from_millis(40),
    ));
    // Its own leases: the relay's token is 1, not below the older relay's, so the store
    // accepts both relays' steps and only the attempt count can stop the third request.
    let mut newer = Relay::new(
        racing.clone(),
        webhook(),
        Arc::new(fence_core::MemoryLeases::new()),
        config,
    )
    .unwrap();
    let (_stop, stopped) = watch::channel(false);
    let report = newer.run_once(&stopped).await;
    let entries = o.entries(&d).await.unwrap();
    println!(
        "attempt limit across a handover: {report:?}; {:#?}",
        entries[0].status
    );
    assert!(
        racing.raced(),
        "the older relay's second attempt was started"
    );
    assert_eq!(
        server.requests_for(entries[0].key.as_str()),
        0,
        "no request beyond the two attempts"
    );
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::DeadLettered { attempts: 3, .. }
        ),
        "{:#?}",
        entries[0].status
    );
    assert_eq!(report.dead_lettered, 1, "{report:?}");
}

/// A delivery that hangs times out as a retryable failure; the retry lands once.
pub async fn a_stuck_sink_times_out_and_the_retry_lands_once(o: &dyn OutboxUnderTest) {
    let server = WebhookServer::start().await;
    let d = domain("order-stuck");
    o.pay(&d, token(1), "a", &server.url("/hang/2"), "eventually")
        .await
        .unwrap();
    let handle = relay(o, webhook(), fast_relay("relay")).spawn();
    let entries = wait_for(
        o,
        std::slice::from_ref(&d),
        Duration::from_secs(20),
        all_settled,
    )
    .await;
    handle.shutdown().await.unwrap();
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::Delivered { attempts: 3, .. }
        ),
        "{entries:#?}"
    );
    assert_eq!(server.applied().len(), 1);
    assert_eq!(server.requests_for(entries[0].key.as_str()), 3);
    assert_eq!(
        server.requests_after_success(),
        0,
        "nothing is sent again once the receiver answered success"
    );
}

/// Relay A pauses mid-delivery past its lease; relay B delivers and marks the entry; A's late
/// mark is fenced, it completes nothing and drops its lease.
pub async fn a_paused_relay_cannot_complete_after_its_successor(o: &dyn OutboxUnderTest) {
    let server = WebhookServer::start().await;
    let d = domain("order-z");
    o.pay(&d, token(1), "a", &server.url("/ok"), "receipt")
        .await
        .unwrap();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let pausing = Arc::new(PausingSink::new(
        webhook(),
        entered.clone(),
        release.clone(),
    ));
    let ttl = Duration::from_millis(300);
    let zombie_config = fast_relay("relay-a")
        .lease_ttl(ttl)
        .delivery_timeout(Duration::from_secs(60));
    // The delivery timeout is checked against the lease: a relay must not outlive it.
    assert!(o.relay(pausing.clone(), zombie_config.clone()).is_err());
    let zombie_config = zombie_config
        .lease_ttl(Duration::from_secs(120))
        .delivery_timeout(Duration::from_secs(60));
    let mut zombie = o.relay(pausing, zombie_config).unwrap();
    let (_stop, stopped) = watch::channel(false);
    let zombie_run = tokio::spawn(async move {
        let report = zombie.run_once(&stopped).await;
        (report, zombie.token())
    });
    entered.notified().await;
    // Relay A is paused mid-delivery. Its lease ends (the lease store expires it) and relay B
    // delivers and marks the entry.
    o.expire_relay_lease().await;
    let successor = relay(o, webhook(), fast_relay("relay-b")).spawn();
    wait_for(
        o,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        all_settled,
    )
    .await;
    let b_report = successor.shutdown().await.unwrap();
    // A wakes up, sends its (now duplicate) request, and tries to mark the entry done.
    release.notify_one();
    let (a_report, a_token) = zombie_run.await.unwrap();
    let entries = o.entries(&d).await.unwrap();
    println!("zombie relay: A {a_report:?} (token now {a_token:?}); B {b_report:?}; server saw {} requests, applied {}",
        server.total_requests(), server.applied().len());
    assert_eq!(a_report.fenced, 1, "A's mark was refused");
    assert_eq!(a_report.delivered, 0, "A completed nothing");
    assert_eq!(a_token, None, "A dropped its lease");
    assert_eq!(b_report.delivered, 1);
    assert_eq!(
        server.applied().len(),
        1,
        "the receiver applied the effect once"
    );
    assert_eq!(
        server.total_requests(),
        2,
        "A's late request was a deduplicated retry"
    );
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::Delivered { attempts: 2, .. }
        ),
        "{entries:#?}"
    );
}

/// Domains are served concurrently within the limit, each one entry at a time, in order.
pub async fn domains_are_served_concurrently_each_in_order(o: &dyn OutboxUnderTest) {
    let domains: Vec<Domain> = (0..6).map(|i| domain(&format!("order-{i}"))).collect();
    for d in &domains {
        for n in 0..3 {
            o.pay(
                d,
                token(1),
                &format!("pay-{n}"),
                "https://mail.example/r",
                &format!("{d}#{n}"),
            )
            .await
            .unwrap();
        }
    }
    let sink = Arc::new(SlowSink {
        in_flight: std::sync::atomic::AtomicUsize::new(0),
        most: std::sync::atomic::AtomicUsize::new(0),
        log: Default::default(),
    });
    let handle = relay(o, sink.clone(), fast_relay("relay").concurrency(4)).spawn();
    let entries = wait_for(o, &domains, Duration::from_secs(20), |e| {
        e.len() == 18 && all_settled(e)
    })
    .await;
    handle.shutdown().await.unwrap();
    let most = sink.most.load(std::sync::atomic::Ordering::SeqCst);
    println!("concurrency: at most {most} deliveries at once (limit 4), 18 delivered");
    assert_eq!(delivered(&entries), 18);
    assert!(
        (2..=4).contains(&most),
        "domains overlap, within the limit: {most}"
    );
    // Within a domain, each delivery starts only after the previous one ended, in order.
    let log = sink.log.lock().unwrap().clone();
    for d in &domains {
        let events: Vec<_> = log
            .iter()
            .filter(|(domain, _, _)| domain == d)
            .map(|(_, payload, started)| (String::from_utf8_lossy(payload).into_owned(), *started))
            .collect();
        let expected: Vec<_> = (0..3)
            .flat_map(|n| [(format!("{d}#{n}"), true), (format!("{d}#{n}"), false)])
            .collect();
        assert_eq!(
            events, expected,
            "{d} is served one entry at a time, in order"
        );
    }
}

/// A delivered entry stays for the retention window, then a sweep purges it; a dead letter
/// stays; the transition's op id is still remembered, so a replay records nothing.
pub async fn delivered_entries_are_purged_after_the_retention_window_dead_letters_stay(
    o: &dyn OutboxUnderTest,
) {
    let server = WebhookServer::start().await;
    let d = domain("order-r");
    o.pay(&d, token(1), "a", &server.url("/ok"), "one")
        .await
        .unwrap();
    o.pay(&d, token(1), "b", &server.url("/reject"), "dead")
        .await
        .unwrap();
    let retention = Duration::from_millis(3000);
    let config = fast_relay("relay")
        .retention(retention)
        .sweep_interval(Duration::from_millis(100));
    let handle = relay(o, webhook(), config).spawn();
    let settled = wait_for(o, std::slice::from_ref(&d), Duration::from_secs(10), |e| {
        e.len() == 2 && all_settled(e)
    })
    .await;
    let at = match settled[0].status {
        EntryStatus::Delivered { at_ms, .. } => at_ms,
        ref other => panic!("{other:?}"),
    };
    // Inside the window (read right after settling, far inside it) the delivered entry is
    // still there, with its key.
    let kept = o.entries(&d).await.unwrap();
    let read_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        read_at < at + 3000,
        "the read came {} ms after delivery, past the window: the machine stalled",
        read_at - at
    );
    assert_eq!(kept.len(), 2, "kept within the window");
    let remaining = wait_for(o, std::slice::from_ref(&d), Duration::from_secs(10), |e| {
        e.len() == 1
    })
    .await;
    assert!(
        matches!(remaining[0].status, EntryStatus::DeadLettered { .. }),
        "dead letters stay"
    );
    o.check_purged(&d).await;
    let report = handle.shutdown().await.unwrap();
    assert!(report.purged >= 1, "{report:?}");
    println!(
        "retention: delivered at {at} ms, purged after the {retention:?} window; dead letter kept"
    );
    let replay = o
        .pay(&d, token(1), "a", &server.url("/ok"), "one")
        .await
        .unwrap();
    assert_eq!(replay, 0, "a replay records nothing");
    assert_eq!(o.entries(&d).await.unwrap().len(), 1);
}

/// A sink that takes a while and records how many deliveries overlapped.
struct SlowSink {
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    /// Every delivery as it started and ended: (domain, payload, started).
    log: std::sync::Mutex<Vec<(Domain, bytes::Bytes, bool)>>,
}

#[async_trait::async_trait]
impl Sink for SlowSink {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), fence_outbox::SinkError> {
        use std::sync::atomic::Ordering::SeqCst;
        let note = |started| {
            self.log
                .lock()
                .unwrap()
                .push((entry.domain.clone(), entry.payload.clone(), started))
        };
        note(true);
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        self.in_flight.fetch_sub(1, SeqCst);
        note(false);
        Ok(())
    }
}

/// What the relay torture's chaos did.
#[derive(Debug, Default)]
struct Chaos {
    relays: usize,
    crashes: usize,
    expiries: usize,
    reports: Vec<RelayReport>,
}

/// The relay's mark is a copy of the rule too (a relay token below the domain's relay mark is
/// stale): on every combination of the mark (none, 2, `u64::MAX`) and the relay token
/// (1, 2, 3, `u64::MAX`), starting an attempt is answered as fence-core's rule (same-owner
/// policy) answers, a refusal names the mark and leaves it, and an accepted token becomes the
/// mark.
pub async fn relay_marks_agree_with_the_rule(o: &dyn OutboxUnderTest) {
    let store = o.store().expect("the relay's store");
    let server = WebhookServer::start().await;
    for (n, mark) in [None, Some(2), Some(u64::MAX)].into_iter().enumerate() {
        for presented in [1, 2, 3, u64::MAX] {
            let (d, head) =
                head_on_the_relays_partition(o, store.as_ref(), &server, n, presented).await;
            if let Some(mark) = mark {
                store
                    .begin(&d, token(mark), head)
                    .await
                    .expect("the setup's relay mark");
            }
            let what = format!("relay mark {mark:?}, relay token {presented}");
            let rule = fence_core::raw::rule::check_token(
                &d,
                mark.map(token),
                token(presented),
                fence_core::EqualTokenPolicy::SameOwner,
            );
            let got = store.begin(&d, token(presented), head).await;
            // The mark now: the greatest relay token that is still admitted.
            let now = match (&rule, &got) {
                (Ok(()), Ok(Some(_))) => presented,
                (
                    Err(FenceError::Fenced { current: a, .. }),
                    Err(OutboxError::Fence(FenceError::Fenced { current: b, .. })),
                ) if a == b => a.get(),
                (rule, got) => panic!("{what}: the rule says {rule:?}, the relay store {got:?}"),
            };
            // Probed below first: an attempt at the mark would raise a lowered one back.
            if now > 1 {
                match store.begin(&d, token(now - 1), head).await {
                    Err(OutboxError::Fence(FenceError::Fenced { current, .. }))
                        if current.get() == now => {}
                    other => panic!("{what}: below the mark {now}: {other:?}"),
                }
            }
            store
                .begin(&d, token(now), head)
                .await
                .unwrap_or_else(|e| panic!("{what}: the mark {now} itself is refused: {e}"));
        }
    }
}

/// A fresh domain of the relay's partition with one pending entry, and that entry's place (as
/// a relay finds it): domains are tried until one lands on partition 0.
async fn head_on_the_relays_partition(
    o: &dyn OutboxUnderTest,
    store: &dyn OutboxStore,
    server: &WebhookServer,
    n: usize,
    presented: u64,
) -> (Domain, u64) {
    for attempt in 0..64 {
        let d = domain(&format!("relay-mark-{n}-{presented}-{attempt}"));
        o.pay(&d, token(1), "pay", &server.url("/ok"), "p")
            .await
            .expect("an entry to relay");
        // A relay's order: the candidates (which refresh a store's view), then the pending head.
        let listed = store.candidates(0, true).await.expect("candidates");
        if !listed.iter().any(|c| c.domain == d) {
            continue;
        }
        if let Some(head) = store.pending(&d, 1).await.expect("pending").first() {
            return (d, head.seq);
        }
    }
    panic!("no domain of 64 landed on the relay's partition");
}

/// The outbox relay under torture (DESIGN.md §7.3): while writers record payments on four
/// domains — new owners taking over at random and their predecessors writing on with the old
/// token — relays are killed mid-work and have their lease ended under them (the old relay
/// runs on as a zombie next to its successor), and the receiver fails and loses replies. Every
/// transition refused as stale left no effect; every accepted one is delivered exactly once,
/// in order per domain; zombie relays' marks are fenced. The seed is printed (and replays the
/// choices with `FENCE_TORTURE_SEED`).
pub async fn relays_under_torture_deliver_each_accepted_effect_once_in_order(
    o: &dyn OutboxUnderTest,
) {
    let seed = seeded::seed(71);
    // The full profile is bounded too: every relay pass reads the domains' kept entries, so a
    // run's cost grows with the square of its payments (2,000 took over 10 minutes).
    let steps = if seeded::full_profile() { 500 } else { 120 };
    let server = WebhookServer::start().await;
    let domains: Vec<Domain> = (0..4).map(|i| domain(&format!("order-t{i}"))).collect();
    let (done, finished) = watch::channel(false);
    let writers = async {
        let mut rng = Rng::new(seed);
        let mut tokens = [1u64; 4];
        let mut accepted_with = [0u64; 4];
        let (mut accepted, mut refused) = (Vec::new(), Vec::new());
        for step in 0..steps {
            let d = rng.below(4) as usize;
            if rng.below(5) == 0 {
                tokens[d] += 1;
            }
            // A predecessor writing on: certainly stale once its successor's token applied.
            let zombie = tokens[d] > 1 && accepted_with[d] == tokens[d] && rng.below(4) == 0;
            let t = if zombie { tokens[d] - 1 } else { tokens[d] };
            let path = ["/ok", "/ok", "/fail/1", "/lost/1"][rng.below(4) as usize];
            let payload = format!("{}#{step}", domains[d].as_str());
            let result = o
                .pay(
                    &domains[d],
                    token(t),
                    &format!("p{step}"),
                    &server.url(path),
                    &payload,
                )
                .await;
            match (zombie, result) {
                (false, Ok(1)) => {
                    accepted_with[d] = t;
                    accepted.push(payload);
                }
                (true, Err(OutboxError::Fence(FenceError::Fenced { .. }))) => refused.push(payload),
                (zombie, other) => panic!(
                    "seed {seed}: payment {payload} with token {t} (stale: {zombie}) answered {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
        }
        done.send_replace(true);
        (accepted, refused)
    };
    let chaos = async {
        let mut rng = Rng::new(seed.rotate_left(17) ^ 0xC4A05);
        let mut chaos = Chaos::default();
        let mut live: Vec<RelayHandle> = Vec::new();
        let spawn = |chaos: &mut Chaos| {
            chaos.relays += 1;
            relay(o, webhook(), fast_relay(&format!("relay-{}", chaos.relays))).spawn()
        };
        live.push(spawn(&mut chaos));
        while !*finished.borrow() {
            tokio::time::sleep(Duration::from_millis(50 + rng.below(150))).await;
            match rng.below(3) {
                0 => {
                    // A crash: the relay dies wherever it is; its lease ends as its TTL would.
                    if let Some(victim) = live.pop() {
                        victim.abort();
                        chaos.crashes += 1;
                    }
                    o.expire_relay_lease().await;
                    live.push(spawn(&mut chaos));
                }
                1 => {
                    // A pause past the lease: the holder runs on as a zombie beside its successor.
                    o.expire_relay_lease().await;
                    chaos.expiries += 1;
                    live.push(spawn(&mut chaos));
                }
                _ => {}
            }
        }
        (chaos, live)
    };
    let ((accepted, refused), (mut chaos, live)) = tokio::join!(writers, chaos);
    let entries = wait_for(o, &domains, Duration::from_secs(180), |e| {
        e.len() == accepted.len() && all_settled(e)
    })
    .await;
    for handle in live {
        match handle.shutdown().await {
            Ok(report) => chaos.reports.push(report),
            Err(error) => panic!("seed {seed}: a relay failed: {error}"),
        }
    }
    let fenced: u64 = chaos.reports.iter().map(|r| r.fenced).sum();
    let line = format!(
        "torture outbox relay: seed {seed} payments {} accepted {} refused {} relays {} crashes {} \
         lease takeovers {} marks refused to surviving relays {fenced} requests {} applied {}",
        steps,
        accepted.len(),
        refused.len(),
        chaos.relays,
        chaos.crashes,
        chaos.expiries,
        server.total_requests(),
        server.applied().len(),
    );
    seeded::report(&line);
    assert_eq!(
        delivered(&entries),
        accepted.len(),
        "seed {seed}: {entries:#?}"
    );
    assert_exactly_once_in_order(&server, &entries);
    let applied: Vec<String> = server
        .applied()
        .into_iter()
        .map(|a| String::from_utf8_lossy(&a.payload).into_owned())
        .collect();
    for payload in &refused {
        assert!(
            !applied.contains(payload),
            "seed {seed}: the refused payment {payload} was delivered"
        );
    }
    for payload in &accepted {
        assert!(
            applied.contains(payload),
            "seed {seed}: {payload} never delivered"
        );
    }
    assert!(
        !refused.is_empty(),
        "seed {seed}: no stale payment was tried: {line}"
    );
    assert!(
        chaos.crashes > 0 && chaos.expiries > 0,
        "seed {seed}: relays were not both crashed and overtaken: {line}"
    );
}
