//! Where a domain's data records go on the data topic's partitions.

use std::fmt;
use std::sync::Arc;

use fence_core::Domain;

/// The function of [`Partitioning::Explicit`]: a domain's partition, or `None` for none.
pub type PartitionPicker = Arc<dyn Fn(&Domain) -> Option<i32> + Send + Sync>;

/// How a domain's data records are placed on the data topic's partitions (the ledger topic is
/// always placed by domain hash).
///
/// ```
/// use fence_kafka::Partitioning;
/// // Domains named `partition-<n>` own partition n.
/// let explicit = Partitioning::explicit(|domain| {
///     domain.as_str().strip_prefix("partition-")?.parse().ok()
/// });
/// let domain = fence_core::Domain::new("partition-7")?;
/// assert_eq!(explicit.partition_of(&domain, 12), Some(7));
/// assert_eq!(Partitioning::DomainHash.partition_of(&domain, 12), Some(1));
/// # Ok::<(), fence_core::FenceError>(())
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Partitioning {
    /// Every record of a domain in partition `FNV-1a-64(domain) mod partitions` (FORMATS.md
    /// §1.8): a domain's records stay in order in one partition. Adding partitions moves
    /// domains, so a fence refuses to run on a data topic whose partition count changed since
    /// the ledger recorded it.
    #[default]
    DomainHash,
    /// Every record of a domain in the partition the function picks (`None`, or a partition
    /// the topic does not have, is refused as invalid input): domains stay where you put them
    /// when partitions are added.
    Explicit(PartitionPicker),
    /// Each record where the producer's own partitioner puts it by the record's key
    /// (librdkafka's `partitioner` setting: `consistent_random` by default, `murmur2_random`
    /// for the Java client's placement), so consumers keep their per-key order and partition
    /// counts may change. A domain's records then spread over partitions: each carries a
    /// `fence-seq` header, the domain's sequence kept in the ledger, which orders them
    /// (`read_log` reads every partition and sorts by it). Costs a ledger record in every
    /// append; the Kafka outbox, which needs a domain in one partition, refuses it.
    RecordKey,
}

impl Partitioning {
    /// [`Partitioning::Explicit`] from a function.
    pub fn explicit(pick: impl Fn(&Domain) -> Option<i32> + Send + Sync + 'static) -> Self {
        Partitioning::Explicit(Arc::new(pick))
    }

    /// The partition of `domain`'s records among `partitions`; `None` for
    /// [`Partitioning::RecordKey`] (each record's key decides) and for an explicit choice the
    /// topic does not have.
    pub fn partition_of(&self, domain: &Domain, partitions: i32) -> Option<i32> {
        match self {
            Partitioning::DomainHash => {
                Some(crate::ledger::partition_for(domain.as_str(), partitions))
            }
            Partitioning::Explicit(pick) => pick(domain).filter(|p| (0..partitions).contains(p)),
            Partitioning::RecordKey => None,
        }
    }

    /// The name used in configuration and messages: `domain-hash`, `explicit`, `record-key`.
    pub fn name(&self) -> &'static str {
        match self {
            Partitioning::DomainHash => "domain-hash",
            Partitioning::Explicit(_) => "explicit",
            Partitioning::RecordKey => "record-key",
        }
    }
}

impl fmt::Debug for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
