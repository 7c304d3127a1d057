//! Fence's own protocols, model-checked (not published).
//!
//! The torture runs prove the fencing invariant on the histories real servers happened to
//! produce; these models check the protocols Fence itself invented over *every* interleaving of
//! their steps, on small bounds, with [`stateright`]. Each model's actors decide with the real
//! decision code — fence-core's acceptance rule and pipeline, the functions the adapters call —
//! never with a copy of it; the servers are modelled at the level of what Fence relies on.
//!
//! Every model comes with a deliberately broken variant that the checker must refute with a
//! counterexample: a model that cannot find the known bug would prove nothing.
//!
//! - [`kafka_claim`]: the Kafka ledger claim around `init_transactions` (producer epochs,
//!   aborted and prepared transactions, zombie appends).
//! - [`lease_guard`]: the lease guard's count against a server on another clock.
//! - [`outbox_relay`]: the outbox relay's handover between lease holders (relay marks, zombie
//!   requests, dead letters).
//! - [`replica_ack`]: Redis's replica acknowledgement rule across a failover.
//!
//! [`check`] runs a model exhaustively (breadth-first) and reports what it visited; the
//! profiles in [`Profile`] set the bounds (`scripts/test` runs [`Profile::Ci`], `scripts/models`
//! [`Profile::Full`]).

pub mod kafka_claim;
pub mod lease_guard;
pub mod outbox_relay;
pub mod replica_ack;
mod run;

pub use run::{check, refute, refute_shortening, Profile, Report};
