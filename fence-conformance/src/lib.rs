#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
// A failed scenario must fail its test: panicking is this crate's job in `report`.
#![allow(clippy::panic)]

pub mod admission;
pub mod ambiguity;
pub mod entry;
pub mod from_env;
mod harness;
pub mod lease;
pub mod log;
mod namespace;
pub mod proxy;
pub mod race;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(feature = "relay")]
pub mod relay_kit;
pub mod retention;
pub mod retirement;
mod scenario;
pub mod seeded;
pub mod services;
pub mod sql_admission;
#[cfg(feature = "relay")]
pub mod sql_relay;
pub mod store;
pub mod vectors;
pub mod wait;
#[cfg(feature = "relay")]
pub mod webhook;

pub use harness::{LogHarness, NotApplicable, StatePart, StoreHarness};
pub use namespace::Namespace;
pub use scenario::{report, Failure, ScenarioResult, Verdict};

#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use fence_core;
    #[cfg(feature = "relay")]
    pub use fence_outbox;
    pub use tokio;
}

/// Generates one `#[tokio::test]` per store scenario, named after it.
///
/// `$make` is an async fn returning `Option<H>` where `H: StoreHarness`; `None` means the
/// harness announced why it skips (allowed only outside the project's test command).
/// The calling crate needs `tokio` (features `macros`, `rt-multi-thread`) as a dev-dependency.
///
/// ```ignore
/// async fn harness() -> Option<MyHarness> { Some(MyHarness::connect().await) }
/// fence_conformance::store_conformance!(harness);
/// ```
#[macro_export]
macro_rules! store_conformance {
    ($make:path) => {
        $crate::__scenario_tests!(store, $crate::StoreHarness, $make;
            newer_token_is_accepted,
            older_token_is_fenced,
            equal_token_same_owner_is_accepted,
            equal_token_strict_is_fenced,
            fresh_resource_accepts_old_token_until_newer,
            claim_fences_before_first_write,
            domains_are_independent,
            delete_leaves_tombstone_keeping_hwm,
            op_id_replay_returns_first_outcome,
            revision_condition_is_checked,
            every_vector_agrees_with_the_rule,
            corrupt_state_is_refused_and_left_alone,
            invalid_input_is_rejected_before_io,
            concurrent_writers_with_mixed_tokens,
            concurrent_strict_writers_one_winner_per_token,
            concurrent_claims_and_writes,
            state_survives_restart,
        );
    };
}

/// Generates one `#[tokio::test]` per log scenario, named after it (see [`store_conformance!`]).
#[macro_export]
macro_rules! log_conformance {
    ($make:path) => {
        $crate::__scenario_tests!(log, $crate::LogHarness, $make;
            log_newer_appended_older_fenced,
            log_equal_token_policy,
            log_claim_fences_before_first_append,
            log_domains_are_independent,
            log_op_id_replay_returns_first_outcome,
            log_every_vector_agrees_with_the_rule,
            log_batch_is_all_or_nothing,
            log_invalid_input_is_rejected_before_io,
            log_concurrent_appenders_with_mixed_tokens,
            log_state_survives_restart,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_tests {
    ($kind:ident, $harness:path, $make:path; $($name:ident),* $(,)?) => {
        $(
            #[$crate::__private::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let Some(harness) = $make().await else {
                    return;
                };
                let namespace = $crate::Namespace::new(stringify!($name));
                let result = $crate::$kind::$name(&harness, &namespace).await;
                let adapter = format!(
                    "{} {}",
                    env!("CARGO_PKG_NAME"),
                    ::std::any::type_name_of_val(&harness)
                );
                $crate::report(
                    &adapter,
                    stringify!($name),
                    &namespace,
                    result,
                    <_ as $harness>::not_applicable(&harness),
                );
            }
        )*
    };
}
