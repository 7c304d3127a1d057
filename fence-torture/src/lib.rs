#![doc = include_str!("../README.md")]

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
