//! The conformance suite for the outbox's transitions, an entry point that is not a trait
//! method (fence-conformance's SQL transition harness).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

fence_conformance::sql_transition_conformance!(
    fence_outbox_postgres::PostgresOutbox,
    support::outbox
);
