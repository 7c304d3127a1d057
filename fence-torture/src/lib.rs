//! Proving the fencing invariant under faults (DESIGN.md §7.3).
//!
//! A [torture run](engine::run) drives workers that take leases from a real issuer and write,
//! delete, claim and read one domain through a fenced store (or append batches to a fenced
//! log), pausing past their lease's expiry
//! at seeded random points so that a frozen worker wakes up and writes with its old token. Every
//! operation and answer goes into a [`History`]; the [checker](checker::check) then proves from
//! the history alone that no stale write was accepted, the mark never decreased, no
//! acknowledged write was lost, the final state is the last applied write, and the fenced
//! register is linearizable on bounded windows.
//!
//! ```
//! use std::sync::Arc;
//! use fence_core::{Domain, MemoryFence, MemoryLeases};
//! use fence_torture::{check, engine, Profile, Target};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), fence_core::InvalidInput> {
//! let target = Target::new(
//!     Arc::new(MemoryFence::new()),
//!     Arc::new(MemoryLeases::new()),
//!     Domain::new("torture/doc")?,
//! );
//! let run = engine::run(&Profile::new(7, 3, 4, 5), &target).await;
//! let report = check(&run.history);
//! assert!(report.holds(), "seed {}: {:?}", run.seed, report.violations);
//! assert_eq!(report.operations, run.history.events.len());
//! # Ok(()) }
//! ```

pub mod checker;
pub mod engine;
pub mod env;
pub mod faults;
pub mod history;
pub mod linearizable;
mod resolve;

pub use checker::{check, Ambiguity, Property, Report, Verdict, Violation};
pub use engine::{Injected, Profile, Run, Subject, Target};
pub use faults::{FaultKind, Faults, ProxyFaults, ServerFaults, ServerProcess};
pub use fence_conformance::seeded::Rng;
pub use history::{Event, History, LoggedRecord, Op, Outcome, SeenEntry};
