//! Committed records in fence-kafka's own type, and the fence headers every fenced record
//! carries: one codec for the appender, `read_log`, the consumer filter and the outbox.

use bytes::Bytes;
use fence_core::{Domain, FencingToken, OperationId};
use rdkafka::message::{Headers, Message};

/// Header carrying the record's domain.
pub const DOMAIN_HEADER: &str = "fence-domain";
/// Header carrying the token of the append that wrote the record (canonical decimal).
pub const TOKEN_HEADER: &str = "fence-token";
/// Header carrying the append's operation id, when it had one.
pub const OP_HEADER: &str = "fence-op";
/// Header holding a record's place in its domain's sequence, under record-key partitioning
/// ([`crate::Partitioning::RecordKey`]), canonical decimal.
pub const SEQ_HEADER: &str = "fence-seq";

/// One committed record, as a read_committed consumer saw it.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommittedRecord {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// The key, if any.
    pub key: Option<Bytes>,
    /// The value (empty for a record without one).
    pub value: Bytes,
    /// Every header, fence headers included, in order.
    pub headers: Vec<(String, Bytes)>,
    /// The record's timestamp (ms since the Unix epoch), when the broker gave one.
    pub timestamp_ms: Option<i64>,
}

/// What the fence headers of a record say.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FenceHeaders {
    /// The domain, as written (not validated: a foreign producer may write anything).
    pub domain: String,
    /// The token, when the header holds a valid one.
    pub token: Option<FencingToken>,
    /// The operation id, when present and valid.
    pub op_id: Option<OperationId>,
    /// The record's place in its domain's sequence (record-key partitioning only), when
    /// present and canonical.
    pub seq: Option<u64>,
}

impl CommittedRecord {
    /// Copies any rdkafka message (from your own consumer, say) into a record.
    pub fn from_message<M: Message>(message: &M) -> Self {
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            Bytes::copy_from_slice(h.value.unwrap_or_default()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        CommittedRecord {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(Bytes::copy_from_slice),
            value: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
            headers,
            timestamp_ms: message.timestamp().to_millis(),
        }
    }

    /// A record built by hand (for tests of code that consumes records).
    pub fn new(
        topic: impl Into<String>,
        partition: i32,
        offset: i64,
        value: impl Into<Bytes>,
    ) -> Self {
        CommittedRecord {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            value: value.into(),
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The value of the last header `name` (fence-kafka adds its fence headers after the
    /// user's, and refuses user headers with their names).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| &value[..])
    }

    /// The value of the last header `name`, if it is UTF-8.
    pub fn header_text(&self, name: &str) -> Option<&str> {
        std::str::from_utf8(self.header(name)?).ok()
    }

    /// The fence headers, or `None` for a record without a domain header (not fenced).
    pub fn fence_headers(&self) -> Option<FenceHeaders> {
        Some(FenceHeaders {
            domain: self.header_text(DOMAIN_HEADER)?.to_owned(),
            token: self
                .header_text(TOKEN_HEADER)
                .and_then(|t| t.parse::<FencingToken>().ok()),
            op_id: self
                .header_text(OP_HEADER)
                .and_then(|op| OperationId::new(op).ok()),
            seq: self
                .header_text(SEQ_HEADER)
                .and_then(fence_core::raw::parse_count),
        })
    }

    /// The headers that are not fence headers, in order.
    pub fn user_headers(&self) -> Vec<(String, Bytes)> {
        self.headers
            .iter()
            .filter(|(key, _)| !is_fence_header(key))
            .cloned()
            .collect()
    }
}

impl std::fmt::Debug for CommittedRecord {
    // Values may be secret: only sizes are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommittedRecord")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("key_bytes", &self.key.as_ref().map(Bytes::len))
            .field("value_bytes", &self.value.len())
            .field("headers", &self.headers.len())
            .finish()
    }
}

/// True for the names of the fence headers.
pub(crate) fn is_fence_header(name: &str) -> bool {
    [DOMAIN_HEADER, TOKEN_HEADER, OP_HEADER, SEQ_HEADER].contains(&name)
}

/// The fence headers an append of `domain` under `token` (and `op_id`) adds to each record,
/// with the record's place in the domain's sequence under record-key partitioning.
pub(crate) fn fence_headers(
    domain: &Domain,
    token: FencingToken,
    op_id: Option<&OperationId>,
    seq: Option<u64>,
) -> Vec<(String, Bytes)> {
    let mut headers = vec![
        (
            DOMAIN_HEADER.to_owned(),
            Bytes::copy_from_slice(domain.as_str().as_bytes()),
        ),
        (TOKEN_HEADER.to_owned(), Bytes::from(token.to_string())),
    ];
    if let Some(op) = op_id {
        headers.push((
            OP_HEADER.to_owned(),
            Bytes::copy_from_slice(op.as_str().as_bytes()),
        ));
    }
    if let Some(seq) = seq {
        headers.push((SEQ_HEADER.to_owned(), Bytes::from(seq.to_string())));
    }
    headers
}
