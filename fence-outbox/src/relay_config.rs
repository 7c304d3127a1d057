//! How a relay runs ([`RelayConfig`]) and what it did ([`RelayReport`]).

use std::time::Duration;

use fence_core::{Domain, OwnerId};

use crate::error::OutboxError;
use crate::retry::RetryPolicy;

/// How a relay runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RelayConfig {
    /// The relay group's name: relays of one name share leases per partition.
    pub name: String,
    /// The partition this relay serves.
    pub partition: u16,
    /// This relay's identity in its lease.
    pub owner: OwnerId,
    /// The lease TTL; renewed when half of it is left.
    pub lease_ttl: Duration,
    /// The longest wait between passes when there is nothing to do: the polling interval of
    /// stores that cannot be notified, and the retry pace of backed-off entries.
    pub poll_interval: Duration,
    /// The most entries read per domain per pass.
    pub batch: usize,
    /// Retries and dead-lettering.
    pub retry: RetryPolicy,
    /// How long delivered entries are kept before they are purged.
    pub retention: Duration,
    /// How often the full sweep recovers domains missing from the index and revisits domains
    /// with retained delivered entries, to purge them: an entry is purged between `retention`
    /// and `retention + sweep_interval` after delivery.
    pub sweep_interval: Duration,
    /// The longest one delivery may take; a stuck sink counts as a retryable failure.
    /// At most half the lease TTL, so a renewed lease outlives every delivery.
    pub delivery_timeout: Duration,
    /// How many domains are served at once (each in order, by its own task).
    pub concurrency: usize,
}

impl RelayConfig {
    /// Defaults: 10 s lease, 200 ms poll, 100 entries per batch, [`RetryPolicy::default`],
    /// 24 h retention, a sweep every 5 minutes, 5 s delivery timeout, 8 domains at once.
    pub fn new(name: impl Into<String>, owner: OwnerId) -> Self {
        RelayConfig {
            name: name.into(),
            partition: 0,
            owner,
            lease_ttl: Duration::from_secs(10),
            poll_interval: Duration::from_millis(200),
            batch: 100,
            retry: RetryPolicy::default(),
            retention: Duration::from_secs(24 * 3600),
            sweep_interval: Duration::from_secs(300),
            delivery_timeout: Duration::from_secs(5),
            concurrency: 8,
        }
    }

    /// Sets how many domains are served at once.
    pub fn concurrency(mut self, domains: usize) -> Self {
        self.concurrency = domains;
        self
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: u16) -> Self {
        self.partition = partition;
        self
    }

    /// Sets the lease TTL.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the poll interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the retention window of delivered entries.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Sets the sweep interval.
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// Sets the delivery timeout.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// The lease domain of this relay's partition.
    pub fn lease_domain(&self) -> Result<Domain, OutboxError> {
        Ok(Domain::new(format!(
            "fence-outbox-relay/{}/{}",
            self.name, self.partition
        ))?)
    }

    pub(crate) fn validate(&self) -> Result<(), OutboxError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        let problem = if !name_ok {
            Some("relay name must be 1 to 64 bytes of ASCII letters, digits, '.', '_' or '-'")
        } else if self.retry.max_attempts == 0 {
            Some("retry.max_attempts must be at least 1")
        } else if self.batch == 0 || self.concurrency == 0 {
            Some("batch and concurrency must be at least 1")
        } else if self.lease_ttl < Duration::from_millis(10) {
            Some("lease_ttl must be at least 10 ms")
        } else if self.delivery_timeout.is_zero() || self.delivery_timeout * 2 > self.lease_ttl {
            Some("delivery_timeout must be positive and at most half of lease_ttl")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(OutboxError::Configuration(problem.into())),
            None => self.lease_domain().map(|_| ()),
        }
    }
}

/// What a relay did, over one pass or its whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayReport {
    /// Entries the sink accepted and the relay marked delivered.
    pub delivered: u64,
    /// Failed attempts that will be retried.
    pub retried: u64,
    /// Entries dead-lettered.
    pub dead_lettered: u64,
    /// Marks refused because a newer relay had taken over (the relay then drops its lease).
    pub fenced: u64,
    /// Delivered entries purged after their retention window.
    pub purged: u64,
    /// Passes run.
    pub passes: u64,
    /// Passes or domains that failed with a backend error (retried next pass).
    pub errors: u64,
}

impl RelayReport {
    pub(crate) fn add(&mut self, other: RelayReport) {
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.dead_lettered += other.dead_lettered;
        self.fenced += other.fenced;
        self.purged += other.purged;
        self.passes += other.passes;
        self.errors += other.errors;
    }
}
