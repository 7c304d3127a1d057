//! What only adapter authors need, in one place (as OpenDAL's `raw`): the decision pipeline
//! and the rule it applies, the compare-and-swap driver, the operation-id memory, the
//! telemetry helper for an adapter's own extensions, and small utilities. Applications use the
//! crate root; this module may change faster than it.

pub mod cas;
pub mod pipeline;
pub mod rule;

pub use crate::backoff::{random_u64, splitmix64};
pub use crate::bounded_cache::BoundedCache;
pub use crate::connection::refused_connection;
pub use crate::domain::percent_encode;
pub use crate::entry_head::EntryHead;
pub use crate::lease::{check_lease_ttl, held_until, poll_for_release, MAX_CLOCK_DRIFT};
pub use crate::op_memory::{OpMemory, OpRecord};
pub use crate::sql::{compare_tables, sql_identifier, ExpectedTables, RowTarget, Shape, StoredOp};
pub use crate::telemetry::{observe, replay_label, OutcomeLabel};
pub use crate::token::parse_count;
pub use crate::token_bounds::TokenBounds;
pub use crate::transaction::run_transaction;
