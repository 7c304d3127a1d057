//! The consumer side: read_committed, plus a token filter as defense in depth.
//!
//! The broker already hides fenced and aborted transactions from read_committed consumers:
//! that is the guarantee. The filter is a second line: it drops (and counts) records whose
//! token is below the highest token seen for their domain in their partition, which catches
//! records that reached the topic outside the fenced path (a producer that bypassed
//! fence-kafka, a misconfigured consumer). It cannot catch a stale record that arrives before
//! any newer one. It judges per partition because commit order holds within one: under
//! record-key partitioning a domain's records in different partitions arrive in any order.

use std::collections::HashMap;
use std::fmt;

use fence_core::{FenceError, FencingToken, InvalidInput};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};

use crate::context::KafkaContext;
use rdkafka::message::Message;

use crate::error::backend;
use crate::record::{CommittedRecord, FenceHeaders};

/// What the filter decided for one record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// A fenced record at or above its domain's highest token so far.
    Admitted,
    /// A fenced record below its domain's highest token: dropped.
    Stale {
        /// The record's domain.
        domain: String,
        /// The record's token.
        token: FencingToken,
        /// The highest token seen for the domain.
        highest: FencingToken,
    },
    /// A record without fence headers: passed through untouched.
    Unfenced,
}

/// Tracks the highest token per domain (in each topic partition) and judges records against it.
#[derive(Debug, Default)]
pub struct TokenFilter {
    highest: HashMap<(String, String, i32), FencingToken>,
    dropped: u64,
}

impl TokenFilter {
    /// An empty filter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Judges one record (and remembers its token when admitted).
    pub fn admit(&mut self, record: &CommittedRecord) -> Admission {
        let Some(FenceHeaders {
            domain,
            token: Some(token),
            ..
        }) = record.fence_headers()
        else {
            return Admission::Unfenced;
        };
        let place = (domain, record.topic.clone(), record.partition);
        match self.highest.get(&place) {
            Some(&highest) if token < highest => {
                self.dropped += 1;
                metrics::counter!("fence_consumer_dropped_total", "topic" => record.topic.clone(), "reason" => "stale").increment(1);
                Admission::Stale {
                    domain: place.0,
                    token,
                    highest,
                }
            }
            _ => {
                self.highest.insert(place, token);
                Admission::Admitted
            }
        }
    }

    /// How many records were dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// A read_committed consumer that drops stale fenced records (see the module docs), and, unless
/// [`FencedConsumer::allow_unfenced`] is set, records without fence headers too: on a fenced
/// topic they were not written through the fence.
pub struct FencedConsumer {
    consumer: StreamConsumer<KafkaContext>,
    filter: TokenFilter,
    allow_unfenced: bool,
    unfenced_dropped: u64,
}

impl FencedConsumer {
    /// Subscribes to `topics` with `isolation.level=read_committed`. A config asking for
    /// `read_uncommitted` is refused: it would show records of aborted and fenced transactions.
    pub fn new(config: &ClientConfig, topics: &[&str]) -> Result<Self, FenceError> {
        Self::with_context(config, KafkaContext::default(), topics)
    }

    /// [`FencedConsumer::new`] with a client context: a SASL/OAUTHBEARER token provider (see
    /// [`KafkaContext::with_oauth`]).
    pub fn with_context(
        config: &ClientConfig,
        context: KafkaContext,
        topics: &[&str],
    ) -> Result<Self, FenceError> {
        if config
            .get("isolation.level")
            .is_some_and(|level| level != "read_committed")
        {
            return Err(InvalidInput::Configuration(
                "fenced topics must be consumed with isolation.level=read_committed".into(),
            )
            .into());
        }
        let consumer: StreamConsumer<KafkaContext> = config
            .clone()
            .set("isolation.level", "read_committed")
            .create_with_context(context)
            .map_err(|e| backend(None, e))?;
        consumer.subscribe(topics).map_err(|e| backend(None, e))?;
        Ok(FencedConsumer {
            consumer,
            filter: TokenFilter::new(),
            allow_unfenced: false,
            unfenced_dropped: 0,
        })
    }

    /// Passes records without fence headers through instead of dropping them (for topics that
    /// mix fenced and plain producers).
    pub fn allow_unfenced(mut self, allow: bool) -> Self {
        self.allow_unfenced = allow;
        self
    }

    /// How many records without fence headers were dropped.
    pub fn unfenced_dropped(&self) -> u64 {
        self.unfenced_dropped
    }

    /// The next admitted record; stale ones (and unfenced ones, unless allowed) are skipped and
    /// counted.
    pub async fn recv(&mut self) -> Result<CommittedRecord, FenceError> {
        loop {
            let message = self.consumer.recv().await.map_err(|e| backend(None, e))?;
            let record = CommittedRecord::from_message(&message);
            match self.filter.admit(&record) {
                Admission::Stale {
                    domain,
                    token,
                    highest,
                } => {
                    tracing::warn!(
                        domain,
                        token = token.get(),
                        highest = highest.get(),
                        "dropped a stale fenced record"
                    );
                }
                Admission::Unfenced if !self.allow_unfenced => {
                    self.unfenced_dropped += 1;
                    metrics::counter!("fence_consumer_dropped_total", "topic" => message.topic().to_owned(), "reason" => "unfenced").increment(1);
                    tracing::warn!(
                        topic = message.topic(),
                        offset = message.offset(),
                        "dropped a record without fence headers"
                    );
                }
                _ => return Ok(record),
            }
        }
    }

    /// The filter, with its drop count.
    pub fn filter(&self) -> &TokenFilter {
        &self.filter
    }

    /// The underlying consumer (offsets, assignment).
    pub fn consumer(&self) -> &StreamConsumer<KafkaContext> {
        &self.consumer
    }
}

impl fmt::Debug for FencedConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedConsumer")
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use crate::record::{DOMAIN_HEADER, TOKEN_HEADER};

    fn record(partition: i32, token: &str) -> CommittedRecord {
        CommittedRecord::new("events", partition, 0, "v")
            .with_header(DOMAIN_HEADER, "orders")
            .with_header(TOKEN_HEADER, token.to_owned())
    }

    #[test]
    fn each_partition_is_judged_in_its_own_commit_order() {
        let mut filter = TokenFilter::new();
        assert_eq!(filter.admit(&record(0, "5")), Admission::Admitted);
        // The domain's earlier record in another partition (record-key partitioning).
        assert_eq!(filter.admit(&record(1, "3")), Admission::Admitted);
        assert!(matches!(
            filter.admit(&record(0, "4")),
            Admission::Stale { token, highest, .. } if token.get() == 4 && highest.get() == 5
        ));
        assert_eq!(filter.admit(&record(1, "3")), Admission::Admitted);
        assert_eq!(filter.dropped(), 1);
    }
}
