//! Helpers for adapter tests that need a real server.
//!
//! Under the project's test command (`FENCE_REQUIRE_SERVICES=1`) a missing server FAILS the
//! test; in a bare `cargo test` it skips with a loud notice.

use std::fmt::Debug;

use fence_core::{Claimed, Domain, Fence, FenceError, FencingToken};

/// True under the project's test command.
pub fn required() -> bool {
    std::env::var("FENCE_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// Reports that `what` is unavailable: panics under the test command, otherwise prints a loud
/// notice and returns `None` so the caller can skip (`unavailable(..)?`).
pub fn unavailable(what: &str) -> Option<std::convert::Infallible> {
    if required() {
        panic!("{what} is unavailable, and FENCE_REQUIRE_SERVICES=1 (scripts/test) requires it");
    }
    eprintln!(
        "\n*** SKIPPED: {what} is unavailable. Run scripts/test to start the real servers. ***\n"
    );
    None
}

/// A token from a literal known to be non-zero.
pub fn token(value: u64) -> FencingToken {
    FencingToken::new(value).unwrap_or_else(|_| panic!("token literal {value} must be non-zero"))
}

/// Asserts that `result` is `Fenced` with exactly these tokens.
pub fn assert_fenced<T: Debug>(result: Result<T, FenceError>, presented: u64, current: u64) {
    match result {
        Err(FenceError::Fenced {
            presented: p,
            current: c,
            ..
        }) => {
            assert_eq!(
                (p.get(), c.get()),
                (presented, current),
                "fenced with other tokens"
            )
        }
        other => panic!("expected fenced {presented} < {current}, got {other:?}"),
    }
}

/// A domain from a literal known to be valid.
pub fn domain(name: &str) -> fence_core::Domain {
    fence_core::Domain::new(name).unwrap_or_else(|e| panic!("domain literal {name:?}: {e}"))
}

/// A fenced put of `value` with the default options.
pub async fn put(
    store: &dyn fence_core::FencedStore,
    domain: &fence_core::Domain,
    token: u64,
    value: &str,
) -> Result<fence_core::WriteOutcome, FenceError> {
    store
        .write(&fence_core::WriteRequest::put(
            domain.clone(),
            self::token(token),
            value.to_owned(),
        ))
        .await
}

/// The high-water mark of `domain`; panics when the read fails.
pub async fn mark_of(
    store: &dyn fence_core::FencedStore,
    domain: &fence_core::Domain,
) -> Option<FencingToken> {
    store
        .high_water_mark(domain)
        .await
        .unwrap_or_else(|e| panic!("the mark of `{domain}`: {e}"))
}

/// The live value of `domain` as text (`None`: absent or deleted); panics when the read fails.
pub async fn value_of(
    store: &dyn fence_core::FencedStore,
    domain: &fence_core::Domain,
) -> Option<String> {
    let snapshot = store
        .read(domain)
        .await
        .unwrap_or_else(|e| panic!("read of `{domain}`: {e}"));
    snapshot
        .value()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The contract for an oversized value, through `store` whose limit is `max` bytes: a put of
/// `max + 1` bytes on the fresh `domain` is `ValueTooLarge` naming both sizes, and nothing
/// reached the resource: `requests_sent` (when the adapter can count its requests) says none
/// was sent, and the domain still has no mark.
pub async fn oversized_value_is_refused_before_io(
    store: &dyn fence_core::FencedStore,
    domain: &fence_core::Domain,
    max: usize,
    requests_sent: Option<&dyn Fn() -> usize>,
) {
    let request = fence_core::WriteRequest::put(domain.clone(), token(1), vec![0u8; max + 1]);
    match store.write(&request).await {
        Err(FenceError::InvalidInput(fence_core::InvalidInput::ValueTooLarge {
            size,
            max: limit,
            ..
        })) => assert_eq!((size, limit), (max + 1, max)),
        other => panic!("an oversized value must be refused, got {other:?}"),
    }
    if let Some(sent) = requests_sent {
        assert_eq!(sent(), 0, "refused before any request");
    }
    assert_eq!(
        store
            .high_water_mark(domain)
            .await
            .unwrap_or_else(|e| panic!("mark of `{domain}`: {e}")),
        None,
        "nothing was written"
    );
}

/// Every operation of a store on `domain` with `token` (write, read, claim, high-water mark),
/// each with its name, for checks that all of them refuse the same way.
pub async fn every_operation(
    store: &dyn fence_core::FencedStore,
    domain: &fence_core::Domain,
    token: u64,
) -> [(&'static str, Result<(), FenceError>); 4] {
    [
        (
            "write",
            put(store, domain, token, "value").await.map(|_| ()),
        ),
        ("read", store.read(domain).await.map(|_| ())),
        (
            "claim",
            store.claim(domain, self::token(token)).await.map(|_| ()),
        ),
        (
            "high_water_mark",
            store.high_water_mark(domain).await.map(|_| ()),
        ),
    ]
}

/// The contract for claims behind client-side state: `a` claims 5, `b` (another process's
/// client of the same resource) claims 6, and `a` confirming 5 again must be `Fenced` by 6, as
/// decided at the resource, however much `a` remembers. Then `a` confirms 6 as the mark.
pub async fn claims_are_decided_at_the_resource(a: &dyn Fence, b: &dyn Fence, domain: &Domain) {
    let claim = |fence: &'static str, result: Result<Claimed, FenceError>| {
        result.unwrap_or_else(|e| panic!("claim by {fence}: {e}"))
    };
    let first = claim("a", a.claim(domain, token(5)).await);
    assert_eq!(first.previous_high_water_mark, None);
    let second = claim("b", b.claim(domain, token(6)).await);
    assert_eq!(second.previous_high_water_mark, Some(token(5)));
    // A last saw 5: confirming 5 again must ask the resource, which says 6.
    assert_fenced(a.claim(domain, token(5)).await, 5, 6);
    assert_eq!(
        a.high_water_mark(domain)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        Some(token(6))
    );
    // Refreshed, A still refuses 5, and confirms 6 as the mark.
    assert_fenced(a.claim(domain, token(5)).await, 5, 6);
    let confirmed = claim("a", a.claim(domain, token(6)).await);
    assert_eq!(confirmed.previous_high_water_mark, Some(token(6)));
}

/// Appends `line` to the file the environment variable `variable` names, when it is set (the
/// reports `scripts/test` and `scripts/torture` print after a run). Best effort: a report that
/// cannot be written never fails the test that produced it.
pub fn append_to_report(variable: &str, line: &str) {
    use std::io::Write;
    if let Ok(path) = std::env::var(variable) {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
}
