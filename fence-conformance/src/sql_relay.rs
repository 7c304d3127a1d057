//! The relay's contract where transitions are the user's own database transactions
//! (PostgreSQL, MySQL), which can stay open or roll back: a writer's open transaction holds
//! back its own domain only (the relay skips the locked row), and stale, rolled-back or
//! op-id-less writers record nothing.
// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::{AdmittedTransaction, Domain, FenceError, FencingToken};
use fence_outbox::{EntryStatus, OutboxError};

use crate::proxy::TcpProxy;
use crate::relay::{wait_for, OutboxUnderTest};
use crate::relay_kit::{all_settled, delivered, fast_relay, webhook};
use crate::services::{domain, token};
use crate::webhook::WebhookServer;

/// A fenced transaction that recorded an effect and is still open.
#[async_trait]
pub trait OpenTransition: Send {
    /// Commits it (the order's change and the effect together).
    async fn commit(self: Box<Self>) -> Result<(), OutboxError>;

    /// Rolls it back.
    async fn rollback(self: Box<Self>) -> Result<(), OutboxError>;
}

/// A SQL adapter's admitted transaction as an [`OpenTransition`].
pub struct Admitted<Tx>(pub Tx);

#[async_trait]
impl<Tx: AdmittedTransaction + 'static> OpenTransition for Admitted<Tx> {
    async fn commit(self: Box<Self>) -> Result<(), OutboxError> {
        Ok(self.0.commit().await?)
    }

    /// Dropped: the database rolls it back (the adapter's rollback, on the pool's time).
    async fn rollback(self: Box<Self>) -> Result<(), OutboxError> {
        drop(self);
        Ok(())
    }
}

/// A SQL outbox as these scenarios drive it.
#[async_trait]
pub trait SqlOutboxUnderTest: OutboxUnderTest {
    /// Begins the fenced transaction of `domain` at `token` (under `op_id`, if any), marks the
    /// order paid in it, records one `send-receipt-email` effect to `url` with `payload`, and
    /// leaves it open; `None` when the op id had committed before.
    async fn open(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: Option<&str>,
        url: &str,
        payload: &str,
    ) -> Result<Option<Box<dyn OpenTransition>>, OutboxError>;
}

/// [`OutboxUnderTest::pay`] of a SQL outbox: its transition opened and committed.
pub async fn pay_and_commit(
    o: &dyn SqlOutboxUnderTest,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<usize, OutboxError> {
    match o.open(domain, token, Some(op_id), url, payload).await? {
        None => Ok(0),
        Some(open) => {
            open.commit().await?;
            Ok(1)
        }
    }
}

/// A SQL outbox whose relay steps are bounded at the server, for
/// [`a_relay_frozen_mid_step_does_not_stall_its_successor`].
#[async_trait]
pub trait BoundedSteps: SqlOutboxUnderTest + Sized {
    /// This outbox with its relay steps bounded at `timeout`.
    fn with_step_timeout(&self, timeout: Duration) -> Self;

    /// The same tables through a new proxy in front of the server, relay steps bounded at
    /// `timeout`: the outbox of a relay the proxy can freeze.
    async fn through_proxy(&self, timeout: Duration) -> (Self, TcpProxy);

    /// Begins a transaction holding entry 1 of `domain` locked, until it is dropped.
    async fn hold_first_entry(&self, domain: &Domain) -> Box<dyn Send>;

    /// Waits until a relay step waits for the held entry: the step's session id.
    async fn step_waiting(&self) -> String;

    /// Waits until session `id` is idle inside its transaction.
    async fn step_idle(&self, id: &str);

    /// Whether the server still has session `id`.
    async fn session_alive(&self, id: &str) -> bool;
}

/// One `#[tokio::test]` per SQL relay scenario, each on the outbox `$make(test name)` returns
/// (`None`: a loud skip outside the test command).
#[macro_export]
macro_rules! sql_relay_tests {
    ($make:expr) => {
        $crate::sql_relay_tests!($make;
            a_writers_open_transaction_holds_back_only_its_own_domain,
            stale_rolled_back_or_op_id_less_writers_record_nothing,
            a_relay_frozen_mid_step_does_not_stall_its_successor,
        );
    };
    ($make:expr; $($scenario:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $scenario() {
            if let Some(o) = ($make)(stringify!($scenario)).await {
                $crate::sql_relay::$scenario(&o).await;
            }
        }
    )*};
}

/// A writer of one domain keeps its transaction open (its effect recorded, its domain's outbox
/// row locked): a relay serving one domain at a time, the busy one first, skips it and
/// delivers the other domain, then delivers the busy one in order once it commits.
pub async fn a_writers_open_transaction_holds_back_only_its_own_domain(o: &dyn SqlOutboxUnderTest) {
    let server = WebhookServer::start().await;
    let url = server.url("/ok");
    let (busy, free) = (domain("order-busy"), domain("order-free"));
    pay_and_commit(o, &busy, token(1), "a", &url, "busy-1")
        .await
        .unwrap();
    let open = o
        .open(&busy, token(1), Some("b"), &url, "busy-2")
        .await
        .unwrap()
        .expect("a new op id");
    pay_and_commit(o, &free, token(1), "a", &url, "free-1")
        .await
        .unwrap();

    // Domains are listed in name order: a relay that waited for the writer's lock would never
    // reach the free domain.
    let handle = o
        .relay(webhook(), fast_relay("relay").concurrency(1))
        .unwrap()
        .spawn();
    let limit = Duration::from_secs(10);
    let free_entries = wait_for(o, std::slice::from_ref(&free), limit, all_settled).await;
    assert_eq!(
        delivered(&free_entries),
        1,
        "the relay did not wait behind the open writer"
    );
    let busy_entries = o.entries(&busy).await.unwrap();
    assert_eq!(
        busy_entries.len(),
        1,
        "the open transaction's entry is not visible"
    );
    assert!(
        matches!(
            busy_entries[0].status,
            EntryStatus::Pending { attempts: 0, .. }
        ),
        "the busy domain was skipped while its row was locked: {busy_entries:#?}"
    );
    open.commit().await.unwrap();
    let busy_entries = wait_for(o, std::slice::from_ref(&busy), limit, |e| {
        e.len() == 2 && all_settled(e)
    })
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(delivered(&busy_entries), 2);
    let order: Vec<String> = server
        .applied()
        .iter()
        .map(|a| String::from_utf8_lossy(&a.payload).into_owned())
        .collect();
    assert_eq!(order, ["free-1", "busy-1", "busy-2"]);
}

/// A stale writer is refused (`Fenced`, naming both tokens) and records nothing; a replayed op
/// id records nothing again; a transition rolled back after recording leaves nothing; without
/// an op id (effects would have no idempotency key) recording is refused.
pub async fn stale_rolled_back_or_op_id_less_writers_record_nothing(o: &dyn SqlOutboxUnderTest) {
    let d = domain("order-s");
    let url = "http://127.0.0.1:9/receipt";
    pay_and_commit(o, &d, token(2), "new", url, "by 2")
        .await
        .unwrap();
    match o.open(&d, token(1), Some("old"), url, "by 1").await {
        Err(OutboxError::Fence(FenceError::Fenced {
            presented, current, ..
        })) => assert_eq!((presented, current), (token(1), token(2))),
        other => panic!("a stale writer: {:?}", other.map(|o| o.is_some())),
    }
    assert_eq!(
        pay_and_commit(o, &d, token(2), "new", url, "again")
            .await
            .unwrap(),
        0,
        "a replayed op id recorded again"
    );
    let open = o
        .open(&d, token(3), Some("rolled-back"), url, "never")
        .await
        .unwrap()
        .expect("a new op id");
    open.rollback().await.unwrap();
    match o.open(&d, token(3), None, url, "no key").await {
        Err(OutboxError::Configuration(_)) => {}
        other => panic!("effects without an op id: {:?}", other.map(|o| o.is_some())),
    }
    let entries = o.entries(&d).await.unwrap();
    let payloads: Vec<&[u8]> = entries.iter().map(|e| &e.payload[..]).collect();
    assert_eq!(payloads, [&b"by 2"[..]]);
}

/// A relay frozen inside a step (a GC pause, SIGSTOP, a blocked thread: here its connections
/// are held by a proxy right after its step's `UPDATE` of the head entry ran) keeps the
/// domain's row locked in an open transaction. The server ends that session after the step
/// timeout, so the relay holding the lease next delivers every entry of every domain within a
/// bound; when the frozen relay wakes, nothing it does lands twice.
pub async fn a_relay_frozen_mid_step_does_not_stall_its_successor<O: BoundedSteps>(o: &O) {
    let step_timeout = Duration::from_secs(1);
    let direct = o.with_step_timeout(step_timeout);
    let server = WebhookServer::start().await;
    let url = server.url("/ok");
    let domains = [domain("order-f1"), domain("order-f2")];
    for d in &domains {
        for n in 0..2 {
            pay_and_commit(&direct, d, token(1), &format!("p{n}"), &url, "x")
                .await
                .unwrap();
        }
    }
    let (frozen_outbox, proxy) = o.through_proxy(step_timeout).await;
    // The frozen relay's step locks the first domain's row, then waits for its held head entry.
    let blocker = direct.hold_first_entry(&domains[0]).await;
    let ttl = Duration::from_secs(2);
    let config = |owner: &str| {
        fast_relay(owner)
            .lease_ttl(ttl)
            .delivery_timeout(Duration::from_millis(800))
    };
    let frozen = frozen_outbox
        .relay(webhook(), config("frozen"))
        .unwrap()
        .spawn();
    let session = direct.step_waiting().await;
    proxy.hold();
    drop(blocker);
    direct.step_idle(&session).await;
    let frozen_at = Instant::now();

    // Its successor takes the lease once the frozen relay's ends and delivers everything.
    let successor = direct
        .relay(webhook(), config("successor"))
        .unwrap()
        .spawn();
    let entries = wait_for(&direct, &domains, Duration::from_secs(20), |e| {
        e.len() == 4 && delivered(e) == 4
    })
    .await;
    println!(
        "frozen relay: every entry delivered {:?} after the relay froze (lease {ttl:?}, step timeout {step_timeout:?})",
        frozen_at.elapsed()
    );
    assert_eq!(delivered(&entries), 4);
    assert!(
        !direct.session_alive(&session).await,
        "the server ended the frozen relay's session"
    );

    // The frozen relay wakes: its step was rolled back by the server and its lease is gone.
    proxy.forward();
    let woken = frozen.shutdown().await;
    let successor = successor.shutdown().await.unwrap();
    println!("frozen relay after waking: {woken:?}; successor: {successor:?}");
    let applied = server.applied();
    assert_eq!(applied.len(), 4, "each entry applied once: {applied:?}");
    let after = wait_for(&direct, &domains, Duration::from_secs(5), all_settled).await;
    assert_eq!(delivered(&after), 4);
}

/// Implements [`OutboxUnderTest`] for a SQL outbox's test type `$under`, whose field `outbox`
/// is the crate's outbox (`entries`, `dead_letters`, `discard_dead_letter`, `fence().leases()`,
/// and [`fence_outbox::OutboxStore`]), which also implements [`SqlOutboxUnderTest`]: `pay` is
/// [`pay_and_commit`], relays are leased from the fence's own leases, and `$expire(&outbox)`
/// ends the relay lease.
#[macro_export]
macro_rules! sql_outbox_under_test {
    ($under:ty, $expire:path) => {
        #[$crate::__private::async_trait]
        impl $crate::relay::OutboxUnderTest for $under {
            async fn pay(
                &self,
                domain: &$crate::__private::fence_core::Domain,
                token: $crate::__private::fence_core::FencingToken,
                op_id: &str,
                url: &str,
                payload: &str,
            ) -> Result<usize, $crate::__private::fence_outbox::OutboxError> {
                $crate::sql_relay::pay_and_commit(self, domain, token, op_id, url, payload).await
            }

            async fn entries(
                &self,
                domain: &$crate::__private::fence_core::Domain,
            ) -> Result<
                Vec<$crate::__private::fence_outbox::OutboxEntry>,
                $crate::__private::fence_outbox::OutboxError,
            > {
                self.outbox.entries(domain).await
            }

            async fn dead_letters(
                &self,
                domain: &$crate::__private::fence_core::Domain,
            ) -> Result<
                Vec<$crate::__private::fence_outbox::OutboxEntry>,
                $crate::__private::fence_outbox::OutboxError,
            > {
                self.outbox.dead_letters(domain).await
            }

            async fn discard_dead_letter(
                &self,
                domain: &$crate::__private::fence_core::Domain,
                seq: u64,
            ) -> Result<bool, $crate::__private::fence_outbox::OutboxError> {
                self.outbox.discard_dead_letter(domain, seq).await
            }

            fn relay(
                &self,
                sink: std::sync::Arc<dyn $crate::__private::fence_outbox::Sink>,
                config: $crate::__private::fence_outbox::RelayConfig,
            ) -> Result<
                $crate::__private::fence_outbox::Relay,
                $crate::__private::fence_outbox::OutboxError,
            > {
                let leases: std::sync::Arc<dyn $crate::__private::fence_core::LeaseManager> =
                    std::sync::Arc::new(self.outbox.fence().leases());
                $crate::__private::fence_outbox::Relay::new(
                    std::sync::Arc::new(self.outbox.clone()),
                    sink,
                    leases,
                    config,
                )
            }

            fn store(
                &self,
            ) -> Result<
                std::sync::Arc<dyn $crate::__private::fence_outbox::OutboxStore>,
                $crate::__private::fence_outbox::OutboxError,
            > {
                Ok(std::sync::Arc::new(self.outbox.clone()))
            }

            async fn expire_relay_lease(&self) {
                $expire(&self.outbox).await;
            }
        }
    };
}
