//! The relay on the DynamoDB outbox against the shared moto server and a real local webhook
//! server that deduplicates by Idempotency-Key: fence-conformance's relay contract
//! (exactly-once observed delivery in order across a relay crash, a paused relay fenced by its
//! successor, dead letters, stuck sinks, concurrency, purges, the relay torture run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

fence_conformance::relay_contract_tests!(support::under_test);
