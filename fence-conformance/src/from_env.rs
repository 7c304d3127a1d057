//! What every adapter's `from_env` owes its users, checked on the fence it built: the settings
//! from the environment apply, and a server that cannot be reached is a retryable
//! `Unavailable` whose message never shows the password of the URL it was given.

// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;

use fence_core::{BackendErrorKind, FenceError, FencedStore};

use crate::services::{domain, put, token, value_of};

/// The password the unreachable server's URL holds (`app:s3cret@…`).
pub const PASSWORD: &str = "s3cret";

/// `store` was built from its adapter's variables with `FENCE_MAX_TOKEN_STEP=10`: it writes
/// and reads back, and the step applies (a claim of 20 above a mark of 3 is `TokenTooFar`).
pub async fn a_fence_from_the_variables_obeys_them(store: &dyn FencedStore) {
    let configured = domain("configured");
    put(store, &configured, 3, "from the environment")
        .await
        .expect("a write of a fence from the environment");
    assert_eq!(
        value_of(store, &configured).await.as_deref(),
        Some("from the environment")
    );
    match store.claim(&configured, token(20)).await {
        Err(FenceError::TokenTooFar { .. }) => {}
        other => panic!("the step from the environment: {other:?}"),
    }
}

/// `built` came from variables naming an unreachable server with [`PASSWORD`] in its URL.
pub fn an_unreachable_server_is_unavailable_without_its_password<T: Debug>(
    built: Result<T, FenceError>,
) {
    match built {
        Err(error @ FenceError::Backend { .. })
            if error.backend_kind() == Some(BackendErrorKind::Unavailable) =>
        {
            assert!(!error.to_string().contains(PASSWORD), "{error}");
            assert!(!format!("{error:?}").contains(PASSWORD), "{error:?}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}
