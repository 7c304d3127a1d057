//! What a fenced request carries: the token, the mutation, and its optional conditions.

use std::fmt;

use bytes::Bytes;

use crate::fencing::Fencing;
use crate::{Domain, FencingToken, Revision};

/// A compare-and-set condition on the data's own revision, independent of the token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteCondition {
    /// No condition.
    #[default]
    Any,
    /// There is no live value: nothing was ever written, or it was deleted.
    Absent,
    /// The domain's current revision (of a value or a tombstone) equals this one.
    Revision(Revision),
}

impl fmt::Display for WriteCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteCondition::Any => f.write_str("any state"),
            WriteCondition::Absent => f.write_str("no live value"),
            WriteCondition::Revision(revision) => write!(f, "revision {revision}"),
        }
    }
}

/// The change a [`WriteRequest`] makes.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mutation {
    /// Store this value.
    Put(Bytes),
    /// Remove the value, leaving a tombstone that keeps the high-water mark.
    Delete,
}

impl fmt::Debug for Mutation {
    // Payloads may be secret: only their size is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mutation::Put(value) => write!(f, "Put({} bytes)", value.len()),
            Mutation::Delete => f.write_str("Delete"),
        }
    }
}

/// A fenced write or delete of one domain's value.
///
/// ```
/// use fence_core::{Domain, EqualTokenPolicy, FencingToken, OperationId, WriteRequest};
/// let request = WriteRequest::put(Domain::new("orders")?, FencingToken::new(7)?, "paid")
///     .with_op_id(OperationId::new("order-1/pay")?)
///     .with_policy(EqualTokenPolicy::Strict);
/// assert_eq!(request.token().get(), 7);
/// assert_eq!(format!("{request:?}").contains("paid"), false); // payloads stay out of Debug
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRequest {
    fencing: Fencing,
    mutation: Mutation,
    condition: WriteCondition,
}

crate::fenced_request!(
    WriteRequest,
    op_id_doc = "The idempotency key of this logical write: a duplicate reports the first outcome."
);

impl WriteRequest {
    /// A fenced write of `value`.
    pub fn put(domain: Domain, token: FencingToken, value: impl Into<Bytes>) -> Self {
        Self::new(domain, token, Mutation::Put(value.into()))
    }

    /// A fenced delete: the value goes, a tombstone keeps the high-water mark.
    pub fn delete(domain: Domain, token: FencingToken) -> Self {
        Self::new(domain, token, Mutation::Delete)
    }

    /// A fenced request with any mutation.
    pub fn new(domain: Domain, token: FencingToken, mutation: Mutation) -> Self {
        WriteRequest {
            fencing: Fencing::new(domain, token),
            mutation,
            condition: WriteCondition::Any,
        }
    }

    /// Sets a compare-and-set condition on the data's revision.
    pub fn with_condition(mut self, condition: WriteCondition) -> Self {
        self.condition = condition;
        self
    }

    /// The mutation.
    pub fn mutation(&self) -> &Mutation {
        &self.mutation
    }

    /// The value of a put, `None` for a delete.
    pub fn value(&self) -> Option<&Bytes> {
        match &self.mutation {
            Mutation::Put(value) => Some(value),
            Mutation::Delete => None,
        }
    }

    /// The revision condition.
    pub fn condition(&self) -> WriteCondition {
        self.condition
    }

    /// [`crate::Operation::Write`] or [`crate::Operation::Delete`].
    pub fn operation(&self) -> crate::Operation {
        match self.mutation {
            Mutation::Put(_) => crate::Operation::Write,
            Mutation::Delete => crate::Operation::Delete,
        }
    }
}

/// One record of a log append.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's key (Kafka partitioning key), if any.
    pub key: Option<Bytes>,
    /// The payload.
    pub value: Bytes,
    /// User headers; adapters add their own (token, operation id) beside them.
    pub headers: Vec<(String, Bytes)>,
}

impl Record {
    /// A record with a payload and nothing else.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Record {
            key: None,
            value: value.into(),
            headers: Vec::new(),
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key_bytes", &self.key.as_ref().map(Bytes::len))
            .field("value_bytes", &self.value.len())
            .field("headers", &self.headers.len())
            .finish()
    }
}

/// A fenced, all-or-nothing append of a batch of records to one domain's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendRequest {
    fencing: Fencing,
    records: Vec<Record>,
}

crate::fenced_request!(
    AppendRequest,
    op_id_doc =
        "The idempotency key of this logical append: a duplicate reports the first outcome."
);

impl AppendRequest {
    /// A fenced append of `records` (committed together or not at all).
    pub fn new(domain: Domain, token: FencingToken, records: Vec<Record>) -> Self {
        AppendRequest {
            fencing: Fencing::new(domain, token),
            records,
        }
    }

    /// The records.
    pub fn records(&self) -> &[Record] {
        &self.records
    }
}
