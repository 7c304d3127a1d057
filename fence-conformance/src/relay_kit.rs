//! Outbox relays: test-sized relay settings, the effect kinds the tests register, the webhook
//! sink aimed at [`crate::webhook::WebhookServer`], and sinks that crash or pause mid-delivery.
// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::webhook::WebhookServer;
use async_trait::async_trait;
use fence_core::FencingToken;
use fence_core::{Domain, OperationId, OwnerId};
use fence_outbox::{
    Candidate, DestinationRule, EffectKinds, EntryStatus, OutboxEntry, OutboxError, OutboxStore,
    Purged, RelayConfig, RetryPolicy, Settlement, Sink, SinkError, WebhookSink,
};
use tokio::sync::Notify;

/// The kinds the tests use.
pub fn kinds() -> EffectKinds {
    EffectKinds::new()
        .register("send-receipt-email", DestinationRule::HttpUrl)
        .and_then(|k| k.register("charge-card", DestinationRule::HttpUrl))
        .and_then(|k| k.register("enqueue", DestinationRule::Opaque))
        .expect("valid kinds")
}

/// An operation id from a literal.
pub fn op(name: &str) -> OperationId {
    OperationId::new(name).expect("valid op id")
}

/// A relay config with test-sized timings.
pub fn fast_relay(owner: &str) -> RelayConfig {
    RelayConfig::new("test", OwnerId::new(owner).unwrap())
        // Timeouts with room for a loaded 2-core machine: exact attempt counts must not depend
        // on a healthy request answering within a few hundred milliseconds.
        .lease_ttl(Duration::from_millis(4000))
        .poll_interval(Duration::from_millis(20))
        .delivery_timeout(Duration::from_millis(1500))
        .retry(RetryPolicy::new(
            6,
            Duration::from_millis(20),
            Duration::from_millis(100),
        ))
}

/// A webhook sink with a test-sized timeout.
pub fn webhook() -> Arc<dyn Sink> {
    Arc::new(
        WebhookSink::new()
            .expect("webhook sink")
            .timeout(Duration::from_millis(1200)),
    )
}

/// A sink that delivers, and after `left` successes hangs forever before returning, so the
/// relay can be killed between the delivery and its mark.
pub struct CrashAfterDeliveries {
    inner: Arc<dyn Sink>,
    left: std::sync::atomic::AtomicUsize,
    crashed: Arc<Notify>,
}

impl CrashAfterDeliveries {
    /// Delivers through `inner`, and hangs after `left` deliveries, notifying `crashed`.
    pub fn new(inner: Arc<dyn Sink>, left: usize, crashed: Arc<Notify>) -> Self {
        CrashAfterDeliveries {
            inner,
            left: std::sync::atomic::AtomicUsize::new(left),
            crashed,
        }
    }
}

#[async_trait]
impl Sink for CrashAfterDeliveries {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError> {
        self.inner.deliver(entry).await?;
        if self.left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.crashed.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// A sink that pauses inside `deliver` until released, like a relay stuck in GC.
pub struct PausingSink {
    inner: Arc<dyn Sink>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

impl PausingSink {
    /// Notifies `entered` inside `deliver`, then waits for `release` before delivering.
    pub fn new(inner: Arc<dyn Sink>, entered: Arc<Notify>, release: Arc<Notify>) -> Self {
        PausingSink {
            inner,
            entered,
            release,
        }
    }
}

#[async_trait]
impl Sink for PausingSink {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError> {
        self.entered.notify_one();
        self.release.notified().await;
        self.inner.deliver(entry).await
    }
}

/// The fence's verdict inside an outbox error; panics on any other refusal (the suites only
/// send transitions the outbox accepts).
pub fn fence_error(error: fence_outbox::OutboxError) -> fence_core::FenceError {
    match error {
        fence_outbox::OutboxError::Fence(error) => error,
        other => panic!("a transition of the suite was refused by the outbox: {other}"),
    }
}

/// The entry-point conformance suite ([`crate::entry_conformance`]) for the transitions of a
/// SQL outbox (`fence-outbox-postgres`, `fence-outbox-mysql`): `$make(test)` gives the outbox
/// (`None`: skipped), which has `transition(&TransactionRequest, &[Effect])` returning
/// [`fence_outbox::Recorded`], `entries(&Domain)` and `fence()`. Each run records one effect,
/// so the entries recorded count the runs.
#[macro_export]
macro_rules! sql_transition_conformance {
    ($outbox:ty, $make:path) => {
        struct TransitionHarness {
            outbox: $outbox,
        }

        #[$crate::__private::async_trait]
        impl $crate::entry::EntryHarness for TransitionHarness {
            async fn run(
                &self,
                call: &$crate::entry::Call,
            ) -> Result<$crate::entry::Ran, $crate::__private::fence_core::FenceError> {
                let op_id = call
                    .op_id
                    .clone()
                    .expect("the suite gives every call an op id");
                let request = $crate::__private::fence_core::TransactionRequest::new(
                    call.domain.clone(),
                    call.token,
                )
                .with_op_id(op_id)
                .with_policy(call.policy);
                let effect =
                    $crate::__private::fence_outbox::Effect::new("enqueue", "jobs", "payload");
                let recorded = self
                    .outbox
                    .transition(&request, &[effect])
                    .await
                    .map_err($crate::relay_kit::fence_error)?;
                Ok($crate::entry::Ran {
                    duplicate: recorded.duplicate,
                    previous: recorded.previous_high_water_mark,
                })
            }

            async fn applied(
                &self,
                domain: &$crate::__private::fence_core::Domain,
            ) -> Result<u64, $crate::__private::fence_core::FenceError> {
                let entries = self
                    .outbox
                    .entries(domain)
                    .await
                    .map_err($crate::relay_kit::fence_error)?;
                Ok(entries.len() as u64)
            }

            fn fence(&self) -> std::sync::Arc<dyn $crate::__private::fence_core::Fence> {
                std::sync::Arc::new(self.outbox.fence().clone())
            }

            fn requires_op_id(&self) -> bool {
                true
            }
        }

        async fn harness() -> Option<&'static TransitionHarness> {
            let outbox = $make("transition_entry").await?;
            Some(Box::leak(Box::new(TransitionHarness { outbox })))
        }

        $crate::entry_conformance!(harness);
    };
}

/// True when no entry is pending.
pub fn all_settled(entries: &[OutboxEntry]) -> bool {
    entries
        .iter()
        .all(|e| !matches!(e.status, EntryStatus::Pending { .. }))
}

/// How many entries were delivered.
pub fn delivered(entries: &[OutboxEntry]) -> usize {
    entries
        .iter()
        .filter(|e| matches!(e.status, EntryStatus::Delivered { .. }))
        .count()
}

/// Checks the server applied every entry exactly once and, per domain, in seq order.
pub fn assert_exactly_once_in_order(server: &WebhookServer, entries: &[OutboxEntry]) {
    let applied = server.applied();
    assert_eq!(
        applied.len(),
        entries.len(),
        "every entry applied exactly once"
    );
    for entry in entries {
        let hits: Vec<_> = applied
            .iter()
            .filter(|a| a.key == entry.key.as_str())
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "entry {} applied {} times",
            entry.key,
            hits.len()
        );
        assert_eq!(hits[0].payload, entry.payload);
    }
    let mut domains: Vec<&Domain> = entries.iter().map(|e| &e.domain).collect();
    domains.dedup();
    for d in domains {
        let expected: Vec<&str> = entries
            .iter()
            .filter(|e| &e.domain == d)
            .map(|e| e.key.as_str())
            .collect();
        let prefix = format!("{}:", d.escaped());
        let observed: Vec<&str> = applied
            .iter()
            .filter(|a| a.key.starts_with(&prefix))
            .map(|a| a.key.as_str())
            .collect();
        assert_eq!(observed, expected, "domain {d} applied out of order");
    }
}

/// A relay's store through which, just before the relay's first `begin`, an older relay
/// (token `older`) begins an attempt on the same entry: the race between a relay's read of
/// an entry and its `begin` that fence-model's relay model found.
#[derive(Debug)]
pub struct OlderRelayBeginsFirst {
    inner: Arc<dyn OutboxStore>,
    older: FencingToken,
    raced: std::sync::atomic::AtomicBool,
}

impl OlderRelayBeginsFirst {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn OutboxStore>, older: FencingToken) -> Self {
        OlderRelayBeginsFirst {
            inner,
            older,
            raced: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the older relay's attempt was started (and accepted by the store).
    pub fn raced(&self) -> bool {
        self.raced.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl OutboxStore for OlderRelayBeginsFirst {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn candidates(&self, partition: u16, sweep: bool) -> Result<Vec<Candidate>, OutboxError> {
        self.inner.candidates(partition, sweep).await
    }
    async fn pending(
        &self,
        domain: &Domain,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.inner.pending(domain, limit).await
    }
    async fn begin(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
    ) -> Result<Option<u32>, OutboxError> {
        if !self.raced() {
            let started = self.inner.begin(domain, self.older, seq).await?;
            self.raced
                .store(started.is_some(), std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.begin(domain, relay, seq).await
    }
    async fn settle(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settlement: &Settlement,
    ) -> Result<bool, OutboxError> {
        self.inner.settle(domain, relay, seq, settlement).await
    }
    async fn purge(
        &self,
        candidate: &Candidate,
        relay: FencingToken,
        retention: Duration,
        drained: bool,
    ) -> Result<Purged, OutboxError> {
        self.inner.purge(candidate, relay, retention, drained).await
    }
}
