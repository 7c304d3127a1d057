#![doc = include_str!("../README.md")]

mod backoff;
mod bounded_cache;
mod capabilities;
pub mod cas;
mod domain;
mod entry_head;
pub mod env;
mod error;
mod fence;
mod fencing;
mod issuer;
mod lease_guard;
mod memory;
mod observed;
mod op_memory;
mod outcome;
pub mod permissions;
pub mod pipeline;
mod rebase;
mod remembered_op;
mod request;
mod retire;
mod retry;
pub mod rule;
mod shards;
pub mod telemetry;
mod token;
mod token_bounds;

pub use bytes::Bytes;

pub use backoff::{random_u64, splitmix64, Backoff};
pub use bounded_cache::BoundedCache;
pub use capabilities::{Capabilities, OpIdRetention};
pub use domain::{percent_encode, Domain, MAX_DOMAIN_BYTES};
pub use entry_head::EntryHead;
pub use error::{BackendErrorKind, BoxError, FenceError, InvalidInput, Operation};
pub use fence::{Fence, FencedLog, FencedStore, FencedStoreExt};
pub use fencing::{EqualTokenPolicy, Fencing};
pub use issuer::{
    check_lease_ttl, Lease, LeaseHolder, LeaseManager, MemoryIssuer, MemoryLeases, TokenIssuer,
};
pub use lease_guard::{LeaseGuard, LeaseLoss, LeaseOptions};
pub use memory::{MemoryFence, DEFAULT_OP_ID_RETENTION, DEFAULT_SHARDS};
pub use observed::Observed;
pub use op_memory::{OpKind, OpMemory, OpOutcome, OpRecord};
pub use outcome::{
    Accepted, AppendOutcome, Appended, Claimed, Entry, LogEntry, Snapshot, WriteOutcome,
};
pub use rebase::{Rebase, RebaseRecord, Rebaser, MAX_REBASE_REASON_BYTES};
pub use remembered_op::RememberedOp;
pub use request::{AppendRequest, Mutation, Record, WriteCondition, WriteRequest};
pub use retire::{Retired, Retirer};
pub use retry::{Retry, RetryPolicy};
pub use token::{parse_count, FencingToken, OperationId, OwnerId, Revision, MAX_IDENTIFIER_BYTES};
pub use token_bounds::{BoundsConfig, IssuerView, TokenBounds};
