//! What every adapter's `from_env` owes its users, checked on the fence it built: the settings
//! from the environment apply, and a server that cannot be reached is a retryable
//! `Unavailable` whose message never shows the password of the URL it was given.

// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;
use std::future::Future;

use fence_core::env::{Env, SqlPoolVariables};
use fence_core::{BackendErrorKind, FenceError, FencedStore, InvalidInput};

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

/// An SQL adapter's `from_env_with` (`from_env`) refuses bad settings before any connection is
/// tried, each with a message naming what is wrong: nothing configured, a `DATABASE_URL` of
/// the same kind disagreeing, `other_kind` (a URL of another database) as the adapter's URL, a
/// namespace that is not a plain identifier, an empty pool, an unreadable `FENCE_ISSUED_ONLY`;
/// and a `DATABASE_URL` of another kind is left alone (the connection is tried, and fails).
/// `url` is a URL of the adapter's kind naming a server that cannot be reached; `namespace`
/// what the adapter calls its tables' namespace in errors (`schema name`).
pub async fn bad_sql_settings_are_refused_before_any_connection<T, F, Fut>(
    variables: &SqlPoolVariables,
    namespace: &str,
    url: &str,
    other_kind: &str,
    from_env: F,
) where
    T: Debug,
    F: Fn(Env) -> Fut,
    Fut: Future<Output = Result<T, FenceError>>,
{
    let refused = |pairs: Vec<(&str, &str)>| {
        let built = from_env(Env::from_pairs(pairs));
        async move {
            match built.await {
                Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
                other => panic!("expected a configuration error, got {other:?}"),
            }
        }
    };
    let product = variables.product;
    let same_kind = format!("{}other@h/db", variables.schemes[0]);
    assert!(refused(vec![])
        .await
        .starts_with(&format!("no {product} configured")));
    assert_eq!(
        refused(vec![(variables.url, url), ("DATABASE_URL", &same_kind)]).await,
        format!(
            "{} and DATABASE_URL are both set and disagree: set one",
            variables.url
        )
    );
    assert_eq!(
        refused(vec![(variables.url, other_kind)]).await,
        format!("{} is not a valid {product} URL", variables.url)
    );
    let bad_name = refused(vec![
        (variables.url, url),
        (variables.namespace, "Bad-Name"),
    ])
    .await;
    assert!(
        bad_name.contains(&format!("{namespace} `Bad-Name` must match")),
        "{bad_name}"
    );
    assert!(
        refused(vec![(variables.url, url), (variables.max_connections, "0")])
            .await
            .contains("at least 1")
    );
    assert!(refused(vec![
        (variables.url, url),
        ("FENCE_ISSUED_ONLY", "sometimes")
    ])
    .await
    .contains("FENCE_ISSUED_ONLY must be"));
    let elsewhere = from_env(Env::from_pairs([
        (variables.url, url),
        ("DATABASE_URL", other_kind),
        (variables.acquire_timeout_ms, "200"),
    ]))
    .await;
    assert!(
        matches!(elsewhere, Err(FenceError::Backend { .. })),
        "a DATABASE_URL of another kind: {elsewhere:?}"
    );
}
