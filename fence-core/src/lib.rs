#![doc = include_str!("../README.md")]

mod backoff;
mod bounded_cache;
mod capabilities;
mod connection;
mod domain;
mod entry_head;
pub mod env;
mod error;
mod fence;
mod fencing;
mod issuer;
mod lease;
mod lease_guard;
mod memory;
mod memory_leases;
mod observed;
mod op_memory;
mod outcome;
pub mod permissions;
pub mod raw;
mod rebase;
mod remembered_op;
mod request;
mod retire;
mod retry;
mod shards;
mod sql;
mod telemetry;
mod token;
mod token_bounds;
mod transaction;

pub use bytes::Bytes;

pub use backoff::Backoff;
pub use capabilities::{Capabilities, OpIdRetention};
pub use domain::{Domain, MAX_DOMAIN_BYTES};
pub use error::{BackendErrorKind, BoxError, FenceError, InvalidInput, Operation};
pub use fence::{Fence, FencedLog, FencedStore, FencedStoreExt};
pub use fencing::{EqualTokenPolicy, Fencing};
pub use issuer::{MemoryIssuer, TokenIssuer};
pub use lease::{Lease, LeaseHolder, LeaseManager};
pub use lease_guard::{LeaseGuard, LeaseLoss, LeaseOptions};
pub use memory::{MemoryFence, DEFAULT_OP_ID_RETENTION, DEFAULT_SHARDS};
pub use memory_leases::MemoryLeases;
pub use observed::Observed;
pub use op_memory::{OpKind, OpOutcome};
pub use outcome::{
    Accepted, AppendOutcome, Appended, Claimed, Entry, LogEntry, Snapshot, WriteOutcome,
};
pub use rebase::{Rebase, RebaseRecord, Rebaser, MAX_REBASE_REASON_BYTES};
pub use remembered_op::RememberedOp;
pub use request::{AppendRequest, Mutation, Record, WriteCondition, WriteRequest};
pub use retire::{Retired, Retirer};
pub use retry::{Retry, RetryPolicy};
pub use token::{FencingToken, OperationId, OwnerId, Revision, MAX_IDENTIFIER_BYTES};
pub use token_bounds::{BoundsConfig, IssuerView};
pub use transaction::{
    AdmittedTransaction, Begun, BoxFuture, Transacted, TransactionError, TransactionRequest,
};
