//! The relay's side of the Kafka outbox: a read_committed view of the data topic, and progress
//! marks appended under the relay's token.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{AppendRequest, Domain, FencedLog, FencingToken, Record};
use fence_kafka::CommittedRecord;
use tokio::sync::Mutex;

use crate::outbox::KafkaOutbox;
use crate::progress::Progress;
use crate::{DESTINATION_HEADER, KEY_HEADER, KIND_HEADER, PROGRESS_HEADER};
use fence_outbox::IdempotencyKey;
use fence_outbox::OutboxError;
use fence_outbox::{Candidate, OutboxStore, Purged};
use fence_outbox::{EntryStatus, OutboxEntry, Settlement};

const BACKEND: &str = "kafka";

/// The relay's store for one partition of a [`KafkaOutbox`]. Create one per relay with
/// [`KafkaOutbox::relay_store`].
pub struct KafkaRelayStore {
    outbox: KafkaOutbox,
    partition: u16,
    progress_domain: Domain,
    view: Mutex<View>,
}

#[derive(Default)]
struct View {
    /// The next offset to read, per data partition.
    next: HashMap<i32, i64>,
    /// Entries of this relay partition, per domain, by offset.
    domains: HashMap<Domain, BTreeMap<u64, OutboxEntry>>,
}

impl KafkaOutbox {
    /// The relay store of `partition` for relays named `relay_name`.
    pub fn relay_store(
        &self,
        relay_name: &str,
        partition: u16,
    ) -> Result<KafkaRelayStore, OutboxError> {
        Ok(KafkaRelayStore {
            outbox: self.clone(),
            partition,
            progress_domain: Domain::new(format!(
                "fence-outbox-progress/{relay_name}/{partition}"
            ))?,
            view: Mutex::new(View::default()),
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn text(message: &CommittedRecord, name: &str) -> Option<String> {
    message.header_text(name).map(str::to_owned)
}

impl View {
    fn apply_progress(&mut self, progress: &Progress) {
        match progress {
            Progress::Begin {
                domain,
                seq,
                attempt,
            } => {
                if let Some(entry) = self.entry(domain, *seq) {
                    if let EntryStatus::Pending { attempts, .. } = &mut entry.status {
                        *attempts = (*attempts).max(*attempt);
                    }
                }
            }
            Progress::Settle {
                domain,
                seq,
                outcome,
                at_ms,
                error,
            } => {
                if let Some(entry) = self.entry(domain, *seq) {
                    let attempts = entry.attempts();
                    entry.status = match outcome {
                        'd' => EntryStatus::Delivered {
                            attempts,
                            at_ms: *at_ms,
                        },
                        'x' => EntryStatus::DeadLettered {
                            attempts,
                            at_ms: *at_ms,
                            last_error: error.clone(),
                        },
                        _ => EntryStatus::Pending {
                            attempts,
                            last_error: Some(error.clone()),
                        },
                    };
                }
            }
        }
    }

    fn entry(&mut self, domain: &Domain, seq: u64) -> Option<&mut OutboxEntry> {
        self.domains.get_mut(domain)?.get_mut(&seq)
    }

    /// The first pending entry of `domain`.
    fn head(&self, domain: &Domain) -> Option<u64> {
        self.domains
            .get(domain)?
            .values()
            .find_map(|e| matches!(e.status, EntryStatus::Pending { .. }).then_some(e.seq))
    }
}

impl KafkaRelayStore {
    /// The fenced domain the relay's progress marks are appended to.
    pub fn progress_domain(&self) -> &Domain {
        &self.progress_domain
    }

    /// Reads what was committed since the last call and folds it into the view.
    async fn refresh(&self, view: &mut View) -> Result<(), OutboxError> {
        let fence = &self.outbox.fence;
        let mut progress = Vec::new();
        for partition in 0..fence.data_partition_count().await? {
            let from = view.next.get(&partition).copied().unwrap_or(0);
            let messages = fence.read_committed(partition, from).await?;
            for message in &messages {
                view.next.insert(partition, message.offset + 1);
                let Some(domain) = message
                    .fence_headers()
                    .and_then(|fence| Domain::new(fence.domain).ok())
                else {
                    continue;
                };
                if domain == self.progress_domain {
                    match Progress::decode(&message.value) {
                        Ok(p) => progress.push(p),
                        Err(error) => {
                            tracing::warn!(offset = message.offset, %error, "skipping a corrupt progress record")
                        }
                    }
                } else if message.header(KEY_HEADER).is_some()
                    && self.outbox.config.partition_of(&domain) == self.partition
                {
                    match self.entry_of(&domain, message) {
                        Ok(entry) => {
                            view.domains
                                .entry(domain)
                                .or_default()
                                .entry(entry.seq)
                                .or_insert(entry);
                        }
                        Err(error) => {
                            tracing::warn!(domain = domain.as_str(), offset = message.offset, %error,
                            "an effect record is malformed; it is dead-lettered")
                        }
                    }
                }
            }
        }
        // Effects first, then marks: a mark always follows its entry in commit order, but the
        // two may sit in different partitions.
        for p in &progress {
            view.apply_progress(p);
        }
        Ok(())
    }

    /// An entry from an effect record; a malformed one becomes a dead letter, never a loss.
    fn entry_of(&self, domain: &Domain, message: &CommittedRecord) -> Result<OutboxEntry, String> {
        let seq = u64::try_from(message.offset).map_err(|_| "negative offset")?;
        let token = message
            .fence_headers()
            .and_then(|fence| fence.token)
            .ok_or("no valid fence-token header")?;
        let key = text(message, KEY_HEADER).ok_or("idempotency key is not UTF-8")?;
        let kind = text(message, KIND_HEADER).ok_or("no effect kind header")?;
        let destination = text(message, DESTINATION_HEADER).ok_or("no destination header")?;
        let recorded_at_ms = message
            .timestamp_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or_else(now_ms);
        let payload = message.value.clone();
        Ok(OutboxEntry::new(
            domain.clone(),
            seq,
            IdempotencyKey::from_recorded(key),
            fence_outbox::Effect::new(kind, destination, payload),
            token,
            recorded_at_ms,
            EntryStatus::Pending {
                attempts: 0,
                last_error: None,
            },
        ))
    }

    /// Appends a mark under the relay's token (fenced), then folds it into the view.
    async fn mark(
        &self,
        view: &mut View,
        relay: FencingToken,
        progress: Progress,
    ) -> Result<(), OutboxError> {
        let record = Record::new(progress.encode()).with_header(
            PROGRESS_HEADER,
            Bytes::copy_from_slice(self.progress_domain.as_str().as_bytes()),
        );
        let request = AppendRequest::new(self.progress_domain.clone(), relay, vec![record]);
        self.outbox.fence.append(&request).await?;
        view.apply_progress(&progress);
        Ok(())
    }

    /// Every entry of `domain` the relay knows (pending, delivered within retention, dead).
    pub async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        let mut view = self.view.lock().await;
        self.refresh(&mut view).await?;
        Ok(view
            .domains
            .get(domain)
            .map(|entries| entries.values().cloned().collect())
            .unwrap_or_default())
    }
}

impl fmt::Debug for KafkaRelayStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaRelayStore")
            .field("outbox", &self.outbox)
            .field("partition", &self.partition)
            .field("progress_domain", &self.progress_domain)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl OutboxStore for KafkaRelayStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// The data topic is read incrementally on every call, so `sweep` changes nothing.
    async fn candidates(
        &self,
        partition: u16,
        _sweep: bool,
    ) -> Result<Vec<Candidate>, OutboxError> {
        if partition != self.partition {
            return Err(OutboxError::Configuration(format!(
                "this relay store serves partition {}, not {partition}",
                self.partition
            )));
        }
        let mut view = self.view.lock().await;
        self.refresh(&mut view).await?;
        Ok(view
            .domains
            .iter()
            .filter(|(_, entries)| {
                entries
                    .values()
                    .any(|e| !matches!(e.status, EntryStatus::DeadLettered { .. }))
            })
            .map(|(domain, _)| Candidate::new(domain.clone(), ""))
            .collect())
    }

    async fn pending(
        &self,
        domain: &Domain,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let view = self.view.lock().await;
        Ok(view
            .domains
            .get(domain)
            .map(|entries| {
                entries
                    .values()
                    .filter(|e| matches!(e.status, EntryStatus::Pending { .. }))
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn begin(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
    ) -> Result<Option<u32>, OutboxError> {
        let mut view = self.view.lock().await;
        if view.head(domain) != Some(seq) {
            return Ok(None);
        }
        let attempt = view
            .entry(domain, seq)
            .map_or(0, |e| e.attempts())
            .saturating_add(1);
        let progress = Progress::Begin {
            domain: domain.clone(),
            seq,
            attempt,
        };
        self.mark(&mut view, relay, progress).await?;
        Ok(Some(attempt))
    }

    async fn settle(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settlement: &Settlement,
    ) -> Result<bool, OutboxError> {
        let mut view = self.view.lock().await;
        if view.head(domain) != Some(seq) {
            return Ok(false);
        }
        let (outcome, error) = settlement.code();
        let error = error.to_owned();
        let progress = Progress::Settle {
            domain: domain.clone(),
            seq,
            outcome,
            at_ms: now_ms(),
            error,
        };
        self.mark(&mut view, relay, progress).await?;
        Ok(true)
    }

    /// Forgets delivered entries older than `retention` from the view; the records themselves
    /// age out with the topic's retention. Dead letters stay visible in [`Self::entries`].
    /// Candidates come from the view, so a drained domain needs nothing more.
    async fn purge(
        &self,
        candidate: &Candidate,
        _relay: FencingToken,
        retention: Duration,
        _drained: bool,
    ) -> Result<Purged, OutboxError> {
        let mut view = self.view.lock().await;
        let cutoff =
            now_ms().saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
        let Some(entries) = view.domains.get_mut(&candidate.domain) else {
            return Ok(Purged::new(0));
        };
        let before = entries.len();
        entries.retain(
            |_, e| !matches!(e.status, EntryStatus::Delivered { at_ms, .. } if at_ms < cutoff),
        );
        Ok(Purged::new(before - entries.len()))
    }
}
