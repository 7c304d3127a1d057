//! The relay: a lease holder that delivers each partition's entries to a sink, in order per
//! domain, with bounded, jittered retries, and marks them done under its own fencing token.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use fence_core::{Domain, FenceError, FencingToken, Lease, LeaseManager};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::delivery::{Backoffs, Worker};
use crate::error::OutboxError;
use crate::relay_config::{RelayConfig, RelayReport};
use crate::sink::Sink;
use crate::store::{Candidate, OutboxStore};

/// Delivers one partition of an outbox to a sink while it holds the partition's lease.
pub struct Relay {
    store: Arc<dyn OutboxStore>,
    sink: Arc<dyn Sink>,
    leases: Arc<dyn LeaseManager>,
    config: Arc<RelayConfig>,
    lease_domain: Domain,
    lease: Option<Lease>,
    not_before: Backoffs,
    last_sweep: Option<Instant>,
    /// The store's wake-up cursor (see [`OutboxStore::wait_for_work`]).
    wake_seen: u64,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("store", &self.store)
            .field("config", &self.config)
            .field("token", &self.token())
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// A relay delivering `store`'s partition to `sink`, leasing it from `leases`.
    pub fn new(
        store: Arc<dyn OutboxStore>,
        sink: Arc<dyn Sink>,
        leases: Arc<dyn LeaseManager>,
        config: RelayConfig,
    ) -> Result<Self, OutboxError> {
        config.validate()?;
        Ok(Relay {
            store,
            sink,
            leases,
            lease_domain: config.lease_domain()?,
            config: Arc::new(config),
            lease: None,
            not_before: Backoffs::default(),
            last_sweep: None,
            wake_seen: 0,
        })
    }

    /// The relay's current fencing token, while it holds the lease.
    pub fn token(&self) -> Option<FencingToken> {
        self.lease.as_ref().map(|l| l.token)
    }

    /// Runs passes until `shutdown` turns true, then finishes the entry in flight, releases
    /// the lease and reports.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> RelayReport {
        let mut total = RelayReport::default();
        while !*shutdown.borrow() {
            let pass = self.run_once(&shutdown).await;
            let idle = pass.delivered + pass.dead_lettered == 0;
            total.add(pass);
            if idle {
                let store = self.store.clone();
                let (partition, idle) = (self.config.partition, self.config.poll_interval);
                tokio::select! {
                    _ = store.wait_for_work(partition, idle, &mut self.wake_seen) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
        self.release().await;
        total
    }

    /// Starts the relay on the current runtime; stop it with [`RelayHandle::shutdown`].
    pub fn spawn(self) -> RelayHandle {
        let (stop, stopped) = watch::channel(false);
        RelayHandle {
            stop,
            task: Some(tokio::spawn(self.run(stopped))),
        }
    }

    /// One pass: take or renew the lease, find domains with work, deliver their heads.
    pub async fn run_once(&mut self, shutdown: &watch::Receiver<bool>) -> RelayReport {
        let mut report = RelayReport {
            passes: 1,
            ..RelayReport::default()
        };
        let Some(token) = self.ensure_lease().await else {
            return report;
        };
        let sweep = self
            .last_sweep
            .is_none_or(|at| at.elapsed() >= self.config.sweep_interval);
        let candidates = match self.store.candidates(self.config.partition, sweep).await {
            Ok(candidates) => candidates,
            Err(error) => {
                tracing::warn!(partition = self.config.partition, %error, "outbox relay could not list domains");
                report.errors += 1;
                return report;
            }
        };
        if sweep {
            self.last_sweep = Some(Instant::now());
        }
        // One gauge per relay group and partition: relays of other groups or partitions
        // report their own work, never overwrite this one's.
        metrics::gauge!(
            "fence_outbox_domains_with_work",
            "backend" => self.store.backend(),
            "relay" => self.config.name.clone(),
            "partition" => self.config.partition.to_string()
        )
        .set(candidates.len() as f64);
        // Waves of up to `concurrency` domains, each served by its own task in order; the
        // lease is renewed between waves, and each task stops when the lease could expire
        // during its next delivery.
        let mut candidates = candidates.into_iter();
        loop {
            let wave: Vec<Candidate> = candidates.by_ref().take(self.config.concurrency).collect();
            if wave.is_empty() || *shutdown.borrow() {
                break;
            }
            let Some(lease) = self.ensure_lease().await.and(self.lease.clone()) else {
                break;
            };
            if lease.token != token {
                break;
            }
            let worker = Arc::new(Worker {
                store: self.store.clone(),
                sink: self.sink.clone(),
                config: self.config.clone(),
                token,
                lease_until: lease.valid_until,
                not_before: self.not_before.clone(),
                shutdown: shutdown.clone(),
            });
            let mut tasks = JoinSet::new();
            for candidate in wave {
                let worker = worker.clone();
                tasks.spawn(async move {
                    let mut served = RelayReport::default();
                    let result = worker.serve(&candidate, &mut served).await;
                    (candidate, served, result)
                });
            }
            while let Some(joined) = tasks.join_next().await {
                let Ok((candidate, served, result)) = joined else {
                    report.errors += 1;
                    continue;
                };
                report.add(served);
                match result {
                    Ok(()) => {}
                    Err(error) if error.is_fenced() => {
                        report.fenced += 1;
                        metrics::counter!("fence_outbox_fenced_total", "backend" => self.store.backend())
                            .increment(1);
                        tracing::warn!(domain = candidate.domain.as_str(), token = token.get(), %error,
                            "a newer relay took over; dropping the lease");
                        self.lease = None;
                    }
                    Err(error) => {
                        report.errors += 1;
                        tracing::warn!(domain = candidate.domain.as_str(), %error, "outbox relay failed on a domain");
                    }
                }
            }
            if self.lease.is_none() {
                break;
            }
        }
        report
    }

    /// Holds the lease: acquires it when free, renews it when half the TTL is gone. `None`
    /// while another relay holds it or the lease store is unreachable.
    async fn ensure_lease(&mut self) -> Option<FencingToken> {
        let ttl = self.config.lease_ttl;
        if let Some(lease) = &self.lease {
            let left = lease.valid_until.saturating_duration_since(Instant::now());
            if left > ttl / 2 {
                return Some(lease.token);
            }
            match self.leases.renew(lease, ttl).await {
                Ok(renewed) => {
                    let token = renewed.token;
                    self.lease = Some(renewed);
                    return Some(token);
                }
                Err(error) => {
                    tracing::warn!(%error, "outbox relay lost its lease");
                    self.lease = None;
                    return None;
                }
            }
        }
        match self
            .leases
            .acquire(&self.lease_domain, &self.config.owner, ttl)
            .await
        {
            Ok(lease) => {
                tracing::info!(
                    partition = self.config.partition,
                    token = lease.token.get(),
                    "outbox relay took the partition lease"
                );
                let token = lease.token;
                self.lease = Some(lease);
                // A new holder forgets backoffs: the attempt counts live in the store.
                self.not_before.clear();
                Some(token)
            }
            Err(FenceError::LeaseHeld { .. }) => None,
            Err(error) => {
                tracing::warn!(%error, "outbox relay could not acquire its lease");
                None
            }
        }
    }

    async fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            if let Err(error) = self.leases.release(&lease).await {
                tracing::warn!(%error, "outbox relay could not release its lease");
            }
        }
    }
}

/// A running relay. Dropping it stops the relay at once, as [`RelayHandle::abort`] does; call
/// [`RelayHandle::shutdown`] to stop after the entry in flight and release the lease.
#[derive(Debug)]
pub struct RelayHandle {
    stop: watch::Sender<bool>,
    /// Taken by `shutdown` and `abort`; what `Drop` finds left, it aborts.
    task: Option<JoinHandle<RelayReport>>,
}

impl RelayHandle {
    /// Asks the relay to stop after the entry in flight, waits, and returns its report.
    pub async fn shutdown(mut self) -> Result<RelayReport, OutboxError> {
        let _ = self.stop.send(true);
        let task = self
            .task
            .take()
            .ok_or_else(|| OutboxError::RelayTask("the relay was stopped already".into()))?;
        task.await
            .map_err(|e| OutboxError::RelayTask(e.to_string()))
    }

    /// Stops the relay at once, as a crash would: no lease release, nothing settled for the
    /// entry in flight (the next holder delivers it again, under the same key).
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for RelayHandle {
    // A dropped handle must not leave a relay delivering with nobody able to stop it.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use fence_core::{MemoryLeases, OwnerId};

    use super::*;
    use crate::entry::{OutboxEntry, Settlement};
    use crate::sink::SinkError;
    use crate::store::Purged;

    /// A store with no entries that counts the relay's passes.
    #[derive(Debug, Default)]
    struct Passes(AtomicUsize);

    #[async_trait]
    impl OutboxStore for Passes {
        fn backend(&self) -> &'static str {
            "counting"
        }
        async fn candidates(&self, _: u16, _: bool) -> Result<Vec<Candidate>, OutboxError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Vec::new())
        }
        async fn pending(&self, _: &Domain, _: usize) -> Result<Vec<OutboxEntry>, OutboxError> {
            Ok(Vec::new())
        }
        async fn begin(
            &self,
            _: &Domain,
            _: FencingToken,
            _: u64,
        ) -> Result<Option<u32>, OutboxError> {
            Ok(None)
        }
        async fn settle(
            &self,
            _: &Domain,
            _: FencingToken,
            _: u64,
            _: &Settlement,
        ) -> Result<bool, OutboxError> {
            Ok(false)
        }
        async fn purge(
            &self,
            _: &Candidate,
            _: FencingToken,
            _: Duration,
            _: bool,
        ) -> Result<Purged, OutboxError> {
            Ok(Purged::new(0))
        }
    }

    struct NoSink;

    #[async_trait]
    impl Sink for NoSink {
        async fn deliver(&self, _: &OutboxEntry) -> Result<(), SinkError> {
            Err(SinkError::permanent("no entries expected"))
        }
    }

    fn spawn(store: Arc<Passes>) -> RelayHandle {
        let owner = OwnerId::new("relay-test").unwrap_or_else(|e| unreachable!("{e}"));
        let config = RelayConfig::new("test", owner).poll_interval(Duration::from_millis(5));
        Relay::new(
            store,
            Arc::new(NoSink),
            Arc::new(MemoryLeases::new()),
            config,
        )
        .unwrap_or_else(|e| unreachable!("{e}"))
        .spawn()
    }

    async fn passes_after(store: &Passes, wait: Duration) -> usize {
        tokio::time::sleep(wait).await;
        store.0.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_dropped_handle_stops_the_relay() {
        let store = Arc::new(Passes::default());
        let handle = spawn(store.clone());
        let running = passes_after(&store, Duration::from_millis(100)).await;
        assert!(running > 0, "the relay ran no pass");
        drop(handle);
        let at_drop = passes_after(&store, Duration::from_millis(20)).await;
        let later = passes_after(&store, Duration::from_millis(200)).await;
        assert_eq!(
            at_drop, later,
            "the relay ran on after its handle was dropped"
        );
    }

    #[tokio::test]
    async fn shutdown_still_returns_the_report() {
        let store = Arc::new(Passes::default());
        let handle = spawn(store.clone());
        passes_after(&store, Duration::from_millis(50)).await;
        let report = handle
            .shutdown()
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert!(report.passes > 0, "{report:?}");
    }
}
