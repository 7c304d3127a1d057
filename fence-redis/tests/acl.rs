//! The documented Redis ACL is enough, and confining: a user with exactly
//! `FENCE_ACL_COMMANDS` on the fence's prefix runs every fenced operation, the leases, the
//! issuer and a re-base, and is refused anything outside them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::time::Duration;

use fence_conformance::services::{domain, put, token, unavailable};
use fence_core::permissions::Role;
use fence_core::{
    Fence, FencedStore, FencingToken, LeaseManager, OwnerId, Rebase, Rebaser, TokenIssuer,
};
use fence_redis::redis::AsyncCommands;
use fence_redis::{RedisFence, FENCE_ACL_COMMANDS, RETIRE_ACL_COMMANDS};
use fence_testkit::redis::{raw, shared_url, unique_prefix};

#[tokio::test]
async fn the_documented_acl_runs_the_fence_and_nothing_else() {
    if shared_url().is_none() {
        unavailable("Redis");
        return;
    }
    let prefix = unique_prefix("acl");
    let commands: Vec<&str> = FENCE_ACL_COMMANDS.split_whitespace().collect();
    let scoped = prefix.clone();
    as_acl_user(&prefix, &commands, |authed| async move {
        let prefix = scoped;
        let fence = RedisFence::builder()
            .url(authed.clone())
            .prefix(prefix.clone())
            .issued_only()
            .max_token_step(NonZeroU64::new(1000).unwrap())
            .wait_for_replicas(1, Duration::from_secs(2))
            .connect()
            .await
            .expect("connect as the ACL user");
        let d = domain("acl");
        let lease = fence
            .leases()
            .acquire(&d, &OwnerId::new("w").unwrap(), Duration::from_secs(30))
            .await
            .expect("acquire");
        fence.claim(&d, lease.token).await.expect("claim");
        put(&fence, &d, lease.token.get(), "v")
            .await
            .expect("write");
        fence.read(&d).await.expect("read");
        fence
            .leases()
            .renew(&lease, Duration::from_secs(30))
            .await
            .expect("renew");
        fence.leases().release(&lease).await.expect("release");
        let next = fence.issuer().issue(&d).await.expect("issue");
        put(&fence, &d, next.get(), "w").await.expect("write");
        fence_core::FencedStoreExt::delete(&fence, &d, next)
            .await
            .expect("delete");
        let refused = put(&fence, &d, next.get() + 1, "x").await;
        assert!(
            matches!(refused, Err(fence_core::FenceError::Unissued { .. })),
            "{refused:?}"
        );

        // A re-base, on an unbounded fence of the same user.
        let plain = RedisFence::builder()
            .url(authed.clone())
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap();
        put(&plain, &d, u64::MAX, "forged")
            .await
            .expect("forged write");
        let rebase = Rebase::new(
            token(next.get()),
            FencingToken::MAX,
            OwnerId::new("ops").unwrap(),
            "acl test",
        )
        .unwrap();
        plain.rebase(&d, &rebase).await.expect("rebase");
        assert_eq!(plain.rebases(&d).await.expect("rebases").len(), 1);

        // Nothing outside the prefix, and no command outside the list.
        let mut as_user = raw(&authed).await;
        // Refused by the ACL itself (NOPERM), not by any other error.
        let noperm = |r: &Result<(), fence_redis::redis::RedisError>| {
            matches!(r, Err(e) if e.kind() == fence_redis::redis::ErrorKind::Server(fence_redis::redis::ServerErrorKind::NoPerm))
        };
        let outside: Result<(), _> = as_user.set("elsewhere", "x").await;
        assert!(noperm(&outside), "a key outside the prefix: {outside:?}");
        let flush: Result<(), _> = fence_redis::redis::cmd("FLUSHALL")
            .query_async(&mut as_user)
            .await;
        assert!(noperm(&flush), "FLUSHALL: {flush:?}");
    })
    .await;
}

/// Creates an ACL user on the shared server with `commands` on `~<prefix>:*`, runs `body` with
/// its URL, and removes the user whatever happened.
async fn as_acl_user<F, Fut>(prefix: &str, commands: &[&str], body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let url = shared_url().expect("the shared Redis");
    let user = format!("fence-{prefix}").replace(':', "-");
    let mut admin = raw(&url).await;
    let mut rules = vec![
        "SETUSER".to_owned(),
        user.clone(),
        "on".into(),
        ">acl-secret".into(),
        "resetkeys".into(),
        format!("~{prefix}:*"),
        "resetchannels".into(),
        "-@all".into(),
    ];
    rules.extend(commands.iter().map(|c| (*c).to_owned()));
    let created: String = fence_redis::redis::cmd("ACL")
        .arg(&rules)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(created, "OK");
    let authed = url.replacen("redis://", &format!("redis://{user}:acl-secret@"), 1);
    let outcome = tokio::spawn(body(authed)).await;
    let _: Result<u32, _> = fence_redis::redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

/// A fence on `url` under `prefix` that waits for one replica.
async fn waiting_fence(url: String, prefix: String) -> fence_core::Observed<RedisFence> {
    RedisFence::builder()
        .url(url)
        .prefix(prefix)
        .wait_for_replicas(1, Duration::from_secs(2))
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_permission_check_names_what_the_acl_refuses() {
    if shared_url().is_none() {
        unavailable("Redis");
        return;
    }
    // Every documented command, retirement's too: everything granted.
    let prefix = unique_prefix("perm-all");
    let all: Vec<&str> = FENCE_ACL_COMMANDS
        .split_whitespace()
        .chain(RETIRE_ACL_COMMANDS.split_whitespace())
        .collect();
    let scoped = prefix.clone();
    as_acl_user(&prefix, &all, |url| async move {
        let fence = waiting_fence(url, scoped).await;
        let report = fence.check_permissions().await.unwrap();
        println!("{report}");
        assert!(report.all_granted(), "{report}");
        // PING, ROLE, EVALSHA/EVAL, the 15 commands inside scripts, WAIT, SCAN.
        assert_eq!(report.permissions.len(), 20, "{report}");
    })
    .await;

    // A worker's user (FENCE_ACL_COMMANDS alone): only retirement's walk is refused.
    let prefix = unique_prefix("perm-worker");
    let worker: Vec<&str> = FENCE_ACL_COMMANDS.split_whitespace().collect();
    let scoped = prefix.clone();
    as_acl_user(&prefix, &worker, |url| async move {
        let fence = RedisFence::builder()
            .url(url)
            .prefix(scoped)
            .connect()
            .await
            .unwrap();
        let report = fence.check_permissions().await.unwrap();
        println!("{report}");
        let denied: Vec<&str> = report.denied().map(|p| p.name.as_str()).collect();
        assert_eq!(denied, ["SCAN"], "{report}");
        // Which is the operators' alone: the worker's credentials pass, an operator's would not.
        assert!(report.granted_for(Role::Worker), "{report}");
        assert!(!report.granted_for(Role::Operator), "{report}");
    })
    .await;

    // Without HSET and WAIT: each refusal names the command.
    let prefix = unique_prefix("perm-some");
    let some: Vec<&str> = FENCE_ACL_COMMANDS
        .split_whitespace()
        .chain(RETIRE_ACL_COMMANDS.split_whitespace())
        .filter(|c| !matches!(*c, "+hset" | "+wait"))
        .collect();
    let scoped = prefix.clone();
    as_acl_user(&prefix, &some, |url| async move {
        let fence = waiting_fence(url, scoped).await;
        let report = fence.check_permissions().await.unwrap();
        println!("{report}");
        let denied: Vec<&str> = report.denied().map(|p| p.name.as_str()).collect();
        assert_eq!(denied.len(), 2, "{report}");
        assert!(denied[0].starts_with("HSET on keys"), "{report}");
        assert_eq!(denied[1], "WAIT", "{report}");
        // The probe wrote no domain's state and removed its own keys: nothing is left.
        let mut admin = raw(&shared_url().unwrap()).await;
        let left: Vec<String> = fence_redis::redis::cmd("KEYS")
            .arg(format!("{}:*", fence.prefix()))
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
    })
    .await;
}
