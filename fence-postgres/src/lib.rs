#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod dialect;
pub mod env;
mod error;
#[cfg(feature = "unstable-raw")]
pub mod extension;
mod fence;
mod lease;
mod literal;
mod mark;
mod mark_rows;
mod permissions;
mod rebase;
mod retire;
mod row;
mod schema;
mod settings;
mod transaction;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;
pub use sqlx;

pub use config::PostgresFenceBuilder;
pub use dialect::PostgresDialect;
pub use error::PostgresFenceError;
pub use fence::{PostgresFence, DEFAULT_MAX_VALUE_BYTES, DEFAULT_OP_ID_RETENTION};
/// The fenced-transaction types every SQL adapter shares (defined in fence-core).
pub use fence_core::{BoxFuture, Transacted, TransactionError, TransactionRequest};
pub use lease::{PostgresIssuer, PostgresLeases};
pub use row::RowFence;
pub use schema::{migrate, SCHEMA_SQL};
pub use transaction::{Begun, FencedTransaction};
