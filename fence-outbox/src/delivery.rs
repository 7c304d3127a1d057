//! One relay task serving one domain: its pending entries in order, each attempt fenced with
//! the relay's token, retries scheduled with backoff, dead letters recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use fence_core::{Domain, FencingToken};
use tokio::sync::watch;
use tracing::Instrument;

use crate::entry::{EntryStatus, OutboxEntry, Settlement};
use crate::error::OutboxError;
use crate::relay_config::{RelayConfig, RelayReport};
use crate::sink::{Sink, SinkError};
use crate::store::{Candidate, OutboxStore};
use crate::verdict;

/// When each backed-off head entry may be tried again; shared by a relay's tasks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Backoffs(Arc<Mutex<HashMap<(Domain, u64), Instant>>>);

impl Backoffs {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(Domain, u64), Instant>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn waiting(&self, key: &(Domain, u64)) -> bool {
        self.map().get(key).is_some_and(|at| Instant::now() < *at)
    }

    fn set(&self, key: (Domain, u64), at: Instant) {
        self.map().insert(key, at);
    }

    fn remove(&self, key: &(Domain, u64)) {
        self.map().remove(key);
    }

    pub(crate) fn clear(&self) {
        self.map().clear();
    }
}

/// What one wave of domain tasks shares.
pub(crate) struct Worker {
    pub(crate) store: Arc<dyn OutboxStore>,
    pub(crate) sink: Arc<dyn Sink>,
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) token: FencingToken,
    /// The lease's end by this machine's clock: no delivery starts that could outlive it.
    pub(crate) lease_until: Instant,
    pub(crate) not_before: Backoffs,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Worker {
    /// Delivers `candidate`'s pending entries in order until one must wait, then purges.
    pub(crate) async fn serve(
        &self,
        candidate: &Candidate,
        report: &mut RelayReport,
    ) -> Result<(), OutboxError> {
        let domain = &candidate.domain;
        let entries = self.store.pending(domain, self.config.batch).await?;
        for entry in &entries {
            if *self.shutdown.borrow() {
                return Ok(());
            }
            let key = (domain.clone(), entry.seq);
            if self.not_before.waiting(&key) {
                return Ok(()); // the head waits: nothing behind it may overtake
            }
            if Instant::now() + self.config.delivery_timeout >= self.lease_until {
                return Ok(()); // the next wave renews the lease first
            }
            if !self.deliver(entry, report).await? {
                return Ok(());
            }
            self.not_before.remove(&key);
        }
        // Nothing was pending: the domain may leave the store's candidates (a transition
        // meanwhile keeps it there). Entries still retained come back with the next sweep.
        let purged = self
            .store
            .purge(
                candidate,
                self.token,
                self.config.retention,
                entries.is_empty(),
            )
            .await?;
        report.purged += purged.removed as u64;
        Ok(())
    }

    /// One attempt on the head entry; true when the domain may go on to the next entry.
    async fn deliver(
        &self,
        entry: &OutboxEntry,
        report: &mut RelayReport,
    ) -> Result<bool, OutboxError> {
        let domain = &entry.domain;
        let backend = self.store.backend();
        let max = self.config.retry.max_attempts;
        let last_error = match &entry.status {
            EntryStatus::Pending { last_error, .. } => last_error.as_deref(),
            _ => None,
        };
        if let Some(Settlement::DeadLetter { error }) =
            verdict::before_attempt(entry.attempts(), last_error, max)
        {
            return self.dead_letter(entry, error, report).await;
        }
        let Some(attempt) = self.store.begin(domain, self.token, entry.seq).await? else {
            return Ok(true); // settled by someone else meanwhile
        };
        // The count read with the entry may be behind: a relay before this one can have
        // started attempts since. The store's count decides, so the limit holds across handovers.
        if let Some(Settlement::DeadLetter { error }) =
            verdict::before_attempt(attempt.saturating_sub(1), last_error, max)
        {
            return self.dead_letter(entry, error, report).await;
        }
        let span = tracing::info_span!(
            "fence_outbox_delivery",
            backend,
            domain = domain.as_str(),
            seq = entry.seq,
            key = entry.key.as_str(),
            attempt
        );
        let delivery = self.sink.deliver(entry).instrument(span);
        let answer = match tokio::time::timeout(self.config.delivery_timeout, delivery).await {
            Ok(answer) => answer,
            Err(_) => Err(SinkError::retryable(format!(
                "delivery timed out after {:?}",
                self.config.delivery_timeout
            ))),
        };
        match verdict::after_attempt(&answer, attempt, max) {
            Settlement::Delivered => {
                self.store
                    .settle(domain, self.token, entry.seq, &Settlement::Delivered)
                    .await?;
                report.delivered += 1;
                metrics::counter!("fence_outbox_delivered_total", "backend" => backend)
                    .increment(1);
                metrics::histogram!("fence_outbox_lag_seconds", "backend" => backend)
                    .record(entry.age().as_secs_f64());
                Ok(true)
            }
            Settlement::DeadLetter { error } => self.dead_letter(entry, error, report).await,
            retry @ Settlement::Retry { .. } => {
                self.store
                    .settle(domain, self.token, entry.seq, &retry)
                    .await?;
                let retry_after = match &answer {
                    Err(SinkError::Retryable { retry_after, .. }) => *retry_after,
                    _ => None,
                };
                let wait = self.config.retry.backoff(attempt, retry_after);
                self.not_before
                    .set((domain.clone(), entry.seq), Instant::now() + wait);
                report.retried += 1;
                metrics::counter!("fence_outbox_retried_total", "backend" => backend).increment(1);
                let (_, reason) = retry.code();
                tracing::info!(domain = domain.as_str(), seq = entry.seq, %reason, ?wait, "delivery failed; retrying later");
                Ok(false)
            }
        }
    }

    async fn dead_letter(
        &self,
        entry: &OutboxEntry,
        error: String,
        report: &mut RelayReport,
    ) -> Result<bool, OutboxError> {
        tracing::warn!(domain = entry.domain.as_str(), seq = entry.seq, key = entry.key.as_str(), %error, "dead-lettering");
        let dead = Settlement::DeadLetter { error };
        self.store
            .settle(&entry.domain, self.token, entry.seq, &dead)
            .await?;
        self.not_before.remove(&(entry.domain.clone(), entry.seq));
        report.dead_lettered += 1;
        metrics::counter!("fence_outbox_dead_lettered_total", "backend" => self.store.backend())
            .increment(1);
        Ok(true)
    }
}
