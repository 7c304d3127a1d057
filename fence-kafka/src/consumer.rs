//! The consumer side: read_committed, plus a token filter as defense in depth.
//!
//! The broker already hides fenced and aborted transactions from read_committed consumers:
//! that is the guarantee. The filter is a second line: it drops (and counts) records whose
//! token is below the highest token seen for their domain, which catches records that reached
//! the topic outside the fenced path (a producer that bypassed fence-kafka, a misconfigured
//! consumer). It cannot catch a stale record that arrives before any newer one.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;

use fence_core::{FenceError, FencingToken, InvalidInput};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
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
    /// A fenced record more than the filter's step above its domain's highest token (above
    /// zero for a domain not seen yet): dropped, and its token not remembered, so one forged
    /// record cannot make the filter drop every later legitimate one.
    TooFar {
        /// The record's domain.
        domain: String,
        /// The record's token.
        token: FencingToken,
        /// The highest token seen for the domain, if any.
        highest: Option<FencingToken>,
    },
    /// A record without fence headers: passed through untouched.
    Unfenced,
}

/// Tracks the highest token per domain and judges records against it.
#[derive(Debug, Default)]
pub struct TokenFilter {
    highest: HashMap<String, FencingToken>,
    dropped: u64,
    max_step: Option<NonZeroU64>,
}

impl TokenFilter {
    /// An empty filter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops records whose token is more than `max_step` above their domain's highest token
    /// (above zero for a domain not seen yet) without remembering it: a producer that wrote a
    /// forged `u64::MAX` past the fence cannot make consumers drop the domain's later records.
    /// Use the step of the fence that writes the topic
    /// ([`crate::KafkaFenceBuilder::max_token_step`]); a consumer that starts in the middle of
    /// a topic needs a step above the domain's tokens so far.
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use fence_kafka::{Admission, CommittedRecord, TokenFilter, DOMAIN_HEADER, TOKEN_HEADER};
    /// let record = |token: &str| {
    ///     let mut r = CommittedRecord::new("orders", 0, 0, "v");
    ///     r.headers.push((DOMAIN_HEADER.into(), "d".into()));
    ///     r.headers.push((TOKEN_HEADER.into(), token.to_owned().into()));
    ///     r
    /// };
    /// let mut filter = TokenFilter::new().with_max_step(NonZeroU64::new(100).unwrap());
    /// assert_eq!(filter.admit(&record("7")), Admission::Admitted);
    /// assert!(matches!(filter.admit(&record("18446744073709551615")), Admission::TooFar { .. }));
    /// assert_eq!(filter.admit(&record("8")), Admission::Admitted);
    /// ```
    pub fn with_max_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_step = Some(max_step);
        self
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
        let domain = domain.as_str();
        let highest = self.highest.get(domain).copied();
        if let Some(max_step) = self.max_step {
            let base = highest.map_or(0, FencingToken::get);
            if token.get().saturating_sub(base) > max_step.get() {
                self.dropped += 1;
                metrics::counter!("fence_consumer_dropped_total", "topic" => record.topic.clone(), "reason" => "too_far").increment(1);
                return Admission::TooFar {
                    domain: domain.to_owned(),
                    token,
                    highest,
                };
            }
        }
        match highest {
            Some(highest) if token < highest => {
                self.dropped += 1;
                metrics::counter!("fence_consumer_dropped_total", "topic" => record.topic.clone(), "reason" => "stale").increment(1);
                Admission::Stale {
                    domain: domain.to_owned(),
                    token,
                    highest,
                }
            }
            _ => {
                self.highest.insert(domain.to_owned(), token);
                Admission::Admitted
            }
        }
    }

    /// How many records were dropped (stale or too far).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// A read_committed consumer that drops stale fenced records (see the module docs), and, unless
/// [`FencedConsumer::allow_unfenced`] is set, records without fence headers too: on a fenced
/// topic they were not written through the fence.
pub struct FencedConsumer {
    consumer: StreamConsumer,
    filter: TokenFilter,
    allow_unfenced: bool,
    unfenced_dropped: u64,
}

impl FencedConsumer {
    /// Subscribes to `topics` with `isolation.level=read_committed`. A config asking for
    /// `read_uncommitted` is refused: it would show records of aborted and fenced transactions.
    pub fn new(config: &ClientConfig, topics: &[&str]) -> Result<Self, FenceError> {
        if config
            .get("isolation.level")
            .is_some_and(|level| level != "read_committed")
        {
            return Err(InvalidInput::Configuration(
                "fenced topics must be consumed with isolation.level=read_committed".into(),
            )
            .into());
        }
        let consumer: StreamConsumer = config
            .clone()
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|e| backend(None, e))?;
        consumer.subscribe(topics).map_err(|e| backend(None, e))?;
        Ok(FencedConsumer {
            consumer,
            filter: TokenFilter::new(),
            allow_unfenced: false,
            unfenced_dropped: 0,
        })
    }

    /// Drops records whose token is too far above their domain's (see
    /// [`TokenFilter::with_max_step`]).
    pub fn with_max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.filter = std::mem::take(&mut self.filter).with_max_step(max_step);
        self
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
                } => log_dropped(&domain, token, Some(highest), "stale"),
                Admission::TooFar {
                    domain,
                    token,
                    highest,
                } => log_dropped(&domain, token, highest, "too far above the domain's tokens"),
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
    pub fn consumer(&self) -> &StreamConsumer {
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

fn log_dropped(domain: &str, token: FencingToken, highest: Option<FencingToken>, why: &str) {
    tracing::warn!(
        domain,
        token = token.get(),
        highest = highest.map(FencingToken::get),
        why,
        "dropped a fenced record"
    );
}
