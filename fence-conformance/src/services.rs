//! Helpers for adapter tests that need a real server.
//!
//! Under the project's test command (`FENCE_REQUIRE_SERVICES=1`) a missing server FAILS the
//! test; in a bare `cargo test` it skips with a loud notice.

use std::fmt::Debug;

use fence_core::{FenceError, FencingToken};

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

/// True when process `pid` holds the socket listening on 127.0.0.1:`port` (read from `/proc`):
/// test servers confirm that the port they were given is theirs, not another process's that
/// took it between the choice and the bind.
pub fn owns_listener(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    // Local address 127.0.0.1 or 0.0.0.0 in /proc's little-endian hex; state 0A = LISTEN.
    let local = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let ours = fields.get(1).is_some_and(|a| local.iter().any(|l| l == a));
            (listening && ours)
                .then(|| fields.get(9).map(|inode| format!("socket:[{inode}]")))
                .flatten()
        })
        .collect();
    !sockets.is_empty()
        && std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| sockets.iter().any(|s| *s == target.to_string_lossy()))
            })
        })
}
