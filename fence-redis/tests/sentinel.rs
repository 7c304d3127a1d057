//! Redis behind Sentinel: a real master and replica, three sentinels, and a failover mid-run.
//!
//! The replica lags (its replication link runs through a loopback proxy that can hold the
//! bytes), owner B claims the domain, the master dies, the sentinels promote the replica, and
//! the stale owner A writes with its old token through a fence that followed the master. Per
//! durability setting the test shows whether B's claim was acknowledged and whether A's stale
//! write is then accepted: the table in the crate README ("Durability") is this test's output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;
use std::time::{Duration, Instant};

use fence_conformance::proxy::TcpProxy;
use fence_conformance::services::{domain as d, token as t};
use fence_conformance::wait::until;
use fence_core::{
    BackendErrorKind, Fence, FenceError, FencedStore, OperationId, Revision, WriteRequest,
};
use fence_redis::{RedisFence, RedisFenceBuilder};
use fence_testkit::redis::{unique_prefix, RedisSentinel, RedisServer};

/// A master whose replica reads it through `link`, and three sentinels (quorum 2).
struct Deployment {
    service: String,
    master: RedisServer,
    replica: RedisServer,
    link: Option<TcpProxy>,
    sentinels: Vec<RedisSentinel>,
}

impl Deployment {
    async fn start(name: &str, master_args: &[&str]) -> Option<Self> {
        let master = RedisServer::start(&format!("{name}-master"), master_args)?;
        let link = TcpProxy::start(format!("127.0.0.1:{}", master.port).parse().unwrap())
            .await
            .unwrap();
        let link_port = link.port().to_string();
        let replica = RedisServer::start(
            &format!("{name}-replica"),
            &["--replicaof", "127.0.0.1", &link_port],
        )?;
        until("the replica syncs", Duration::from_secs(20), || {
            master.replicated_by(&replica)
        })
        .await;
        let service = format!("fence-{name}");
        let sentinels = (0..3)
            .map(|i| RedisSentinel::start(&format!("{name}-sentinel{i}"), &service, master.port, 2))
            .collect::<Option<Vec<_>>>()?;
        // A failover needs the sentinels to know the replica and each other (they meet through
        // the master's hello channel, every 2 s).
        let replica_port = format!("{}", replica.port);
        until(
            "the sentinels know the replica and each other",
            Duration::from_secs(30),
            || {
                sentinels.iter().all(|s| {
                    s.cli(&["SENTINEL", "replicas", &service])
                        .contains(&replica_port)
                        && s.cli(&["SENTINEL", "master", &service])
                            .contains("num-other-sentinels\n2")
                })
            },
        )
        .await;
        Some(Deployment {
            service,
            master,
            replica,
            link: Some(link),
            sentinels,
        })
    }

    fn fence(&self, prefix: &str) -> RedisFenceBuilder {
        RedisFence::builder()
            .sentinel(self.sentinels.iter().map(RedisSentinel::url), &self.service)
            .prefix(prefix)
            .response_timeout(Duration::from_secs(3))
    }

    /// The master dies; bytes the proxy held for the replica die with the link.
    async fn fail_over(&mut self) {
        self.link.take();
        self.master.kill();
        let promoted = self.replica.port;
        until(
            "the sentinels promote the replica",
            Duration::from_secs(60),
            || {
                self.sentinels
                    .iter()
                    .all(|s| s.master_port(&self.service) == Some(promoted))
                    && self
                        .replica
                        .cli(&["INFO", "replication"])
                        .contains("role:master")
            },
        )
        .await;
    }
}

/// What one durability setting gave.
struct Row {
    setting: &'static str,
    claim: String,
    mark_after: Option<u64>,
    stale_write: String,
}

fn shown<T: Debug>(result: &Result<T, FenceError>) -> String {
    match result {
        Ok(_) => "acknowledged".into(),
        Err(FenceError::Unreplicated {
            requested,
            acknowledged,
            ..
        }) => format!(
            "applied, not acknowledged: unreplicated ({acknowledged} of {requested} replicas)"
        ),
        Err(FenceError::Fenced { current, .. }) => format!("fenced (mark {current})"),
        Err(other) => format!("error: {other}"),
    }
}

/// A owns token 5 (replicated), the replica starts lagging if `lagging`, B claims 6, the master
/// dies and the replica is promoted, and A writes with 5.
async fn run(
    setting: &'static str,
    master_args: &[&str],
    choose: fn(RedisFenceBuilder) -> RedisFenceBuilder,
    lagging: bool,
) -> Option<(
    Row,
    Result<fence_core::Claimed, FenceError>,
    Result<(), FenceError>,
)> {
    let name = setting.split_whitespace().next().unwrap_or("setting");
    let mut deployment = Deployment::start(name, master_args).await?;
    let prefix = unique_prefix("sentinel");
    let domain = d("failover");
    // A's first mark and value are on the replica before anything else happens.
    let setup = deployment
        .fence(&prefix)
        .wait_for_replicas(1, Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    setup.claim(&domain, t(5)).await.unwrap();
    let written = setup
        .write(&WriteRequest::put(domain.clone(), t(5), "by A"))
        .await
        .unwrap();
    assert_eq!(written.accepted().replicas_acknowledged, Some(1));
    let owner_a = choose(deployment.fence(&prefix)).connect().await.unwrap();
    let owner_b = choose(deployment.fence(&prefix)).connect().await.unwrap();

    if lagging {
        deployment.link.as_ref().unwrap().hold();
    }
    let claim = owner_b.claim(&domain, t(6)).await;
    deployment.fail_over().await;

    // Read on the promoted master itself, not through anything that might remember.
    let reader = RedisFence::builder()
        .url(deployment.replica.url())
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    let mark_after = reader
        .high_water_mark(&domain)
        .await
        .unwrap()
        .map(|m| m.get());
    // A never noticed anything: its fence follows the master and writes with token 5.
    let stale = owner_a
        .write(&WriteRequest::put(domain.clone(), t(5), "by A, stale"))
        .await
        .map(|_| ());
    if claim.is_err() {
        // B was told its claim is not acknowledged: it claims again, on the new master (where
        // no replica is left to acknowledge it until the old master rejoins as one), and from
        // then on A is fenced.
        let again = owner_b.claim(&domain, t(6)).await;
        assert!(
            matches!(again, Ok(_) | Err(FenceError::Unreplicated { .. })),
            "{setting}: B's second claim {again:?}"
        );
        let after = owner_a
            .write(&WriteRequest::put(
                domain.clone(),
                t(5),
                "by A, stale again",
            ))
            .await;
        assert!(
            matches!(&after, Err(FenceError::Fenced { current, .. }) if current.get() == 6),
            "{setting}: {after:?}"
        );
    }
    Some((
        Row {
            setting,
            claim: shown(&claim),
            mark_after,
            stale_write: match &stale {
                Ok(()) => "ACCEPTED".into(),
                Err(FenceError::Unreplicated { .. }) => {
                    "ACCEPTED (no replica left to acknowledge it)".into()
                }
                other => shown(other),
            },
        },
        claim,
        stale,
    ))
}

fn unwaited(builder: RedisFenceBuilder) -> RedisFenceBuilder {
    builder.no_replica_wait()
}

fn default_wait(builder: RedisFenceBuilder) -> RedisFenceBuilder {
    builder
}

// Multi-threaded: the proxy's tasks run while the test waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_only_unacknowledged_marks_when_changes_wait_for_a_replica() {
    let (asynchronous, min_replicas, waited_lagging, waited_in_sync) = tokio::join!(
        run("no replica wait, replica lagging", &[], unwaited, true),
        run(
            "min-replicas-to-write 1 (lag 10 s) on the master, no replica wait, replica lagging",
            &[
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "10"
            ],
            unwaited,
            true
        ),
        run(
            "WAIT 1 (the default behind Sentinel), replica lagging",
            &[],
            default_wait,
            true
        ),
        run(
            "WAIT 1 (the default behind Sentinel), replica in sync",
            &[],
            default_wait,
            false
        ),
    );
    let (Some(asynchronous), Some(min_replicas), Some(waited_lagging), Some(waited_in_sync)) =
        (asynchronous, min_replicas, waited_lagging, waited_in_sync)
    else {
        return; // redis-server is missing (a loud skip, or a failure under scripts/test)
    };

    println!("| setting | B's claim of 6 | mark after the failover | A's write with 5 after it |");
    println!("|---|---|---:|---|");
    for (row, _, _) in [
        &asynchronous,
        &min_replicas,
        &waited_lagging,
        &waited_in_sync,
    ] {
        println!(
            "| {} | {} | {} | {} |",
            row.setting,
            row.claim,
            row.mark_after.map_or("none".into(), |m| m.to_string()),
            row.stale_write
        );
    }

    // Without a replica's acknowledgement the claim is acknowledged, lost in the failover, and
    // the stale token is accepted after it: min-replicas-to-write narrows the window (the
    // master refuses writes once its replicas lag past the limit) but does not close it.
    for (row, claim, stale) in [&asynchronous, &min_replicas] {
        assert!(claim.is_ok(), "{}: {:?}", row.setting, claim);
        assert_eq!(row.mark_after, Some(5), "{}", row.setting);
        assert!(
            stale.is_ok(),
            "{}: the stale write {:?}",
            row.setting,
            stale
        );
    }
    // With WAIT the lost claim was never acknowledged: B was told to retry, not to go on, so
    // no acknowledged mark is lost (A's write lands before any acknowledged claim of B's).
    let (row, claim, stale) = &waited_lagging;
    assert!(
        matches!(
            claim,
            Err(FenceError::Unreplicated {
                requested: 1,
                acknowledged: 0,
                ..
            })
        ),
        "{}: {claim:?}",
        row.setting
    );
    assert_eq!(row.mark_after, Some(5));
    assert!(
        matches!(stale, Err(FenceError::Unreplicated { .. })),
        "{}: applied on the new master, which has no replica left: {stale:?}",
        row.setting
    );
    // An acknowledged claim is on the replica, survives the failover, and fences A.
    let (row, claim, stale) = &waited_in_sync;
    assert!(claim.is_ok(), "{}: {claim:?}", row.setting);
    assert_eq!(row.mark_after, Some(6), "{}", row.setting);
    assert!(
        matches!(stale, Err(FenceError::Fenced { current, .. }) if current.get() == 6),
        "{}: {stale:?}",
        row.setting
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_follows_the_master_and_a_wrong_service_is_a_clear_error() {
    let Some(mut deployment) = Deployment::start("follow", &[]).await else {
        return;
    };
    let prefix = unique_prefix("sentinel-follow");
    let domain = d("follow");
    let fence = deployment.fence(&prefix).connect().await.unwrap();
    assert!(
        fence.target().contains(&deployment.service),
        "{}",
        fence.target()
    );
    for token in 1..=3 {
        let written = fence
            .write(&WriteRequest::put(
                domain.clone(),
                t(token),
                format!("v{token}"),
            ))
            .await
            .unwrap();
        assert_eq!(written.accepted().replicas_acknowledged, Some(1));
    }
    deployment.fail_over().await;
    // The same fence, without being told: the next request finds the promoted master.
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(snapshot.high_water_mark.map(|m| m.get()), Some(3));
    assert!(
        matches!(&snapshot.entry, fence_core::Entry::Value { value, .. } if value.as_ref() == b"v3"),
        "{snapshot:?}"
    );
    // No replica is left: a change is applied on the new master but reported unreplicated.
    let after = fence
        .write(&WriteRequest::put(domain.clone(), t(4), "v4"))
        .await;
    assert!(
        matches!(
            after,
            Err(FenceError::Unreplicated {
                acknowledged: 0,
                ..
            })
        ),
        "{after:?}"
    );
    assert_eq!(
        fence
            .high_water_mark(&domain)
            .await
            .unwrap()
            .map(|m| m.get()),
        Some(4)
    );

    let wrong = RedisFence::builder()
        .sentinel(
            deployment.sentinels.iter().map(RedisSentinel::url),
            "no-such-service",
        )
        .prefix(&prefix)
        .connect()
        .await;
    match wrong {
        Err(
            error @ FenceError::Backend {
                kind: BackendErrorKind::NotFound,
                ..
            },
        ) => {
            assert!(!error.is_retryable());
            assert!(error.to_string().contains("no-such-service"), "{error}");
        }
        other => panic!("a service no sentinel monitors is not found: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_ordered_failover_the_old_masters_client_finds_the_new_one() {
    let Some(deployment) = Deployment::start("demoted", &[]).await else {
        return;
    };
    let prefix = unique_prefix("sentinel-demoted");
    let domain = d("demoted");
    let fence = deployment.fence(&prefix).connect().await.unwrap();
    fence
        .write(&WriteRequest::put(domain.clone(), t(1), "before"))
        .await
        .unwrap();
    // A failover ordered by an operator: the old master keeps running and becomes a replica.
    // Sentinel drops its clients' connections (CLIENT KILL), so the fence's next request
    // finds the promoted master; a connection that survived would be refused READONLY and the
    // request sent there instead (both prove nothing ran on the old master).
    assert_eq!(
        deployment.sentinels[0].cli(&["SENTINEL", "FAILOVER", &deployment.service]),
        "OK"
    );
    let promoted = deployment.replica.port;
    until(
        "the replica is promoted and the old master replicates it",
        Duration::from_secs(60),
        || {
            deployment.sentinels[0].master_port(&deployment.service) == Some(promoted)
                && deployment.replica.replicated_by(&deployment.master)
        },
    )
    .await;
    // The fence finds the promoted master and the demoted one acknowledges it: right after
    // the failover that can take a second (`Unreplicated`, retried with the same op id).
    let warm_up = WriteRequest::put(domain.clone(), t(2), "found")
        .with_op_id(OperationId::new("warm-up").unwrap());
    let mut found = false;
    for _ in 0..20 {
        match fence.write(&warm_up).await {
            Ok(_) => {
                found = true;
                break;
            }
            Err(FenceError::Unreplicated { .. }) => {}
            Err(other) => panic!("sent to the promoted master: {other}"),
        }
    }
    assert!(found, "acknowledged by the demoted master within 20 waits");
    // Both paths, every run: with the demoted master (now the replica) stopped, the write is
    // applied on the promoted master but unacknowledged (`Unreplicated`); once the replica runs
    // again, the documented answer, a retry with the same operation id, waits for it and
    // replays the write without applying it twice.
    let request = WriteRequest::put(domain.clone(), t(2), "after")
        .with_op_id(OperationId::new("after-failover").unwrap());
    deployment.master.signal("STOP");
    let unacknowledged = fence.write(&request).await;
    deployment.master.signal("CONT");
    assert!(
        matches!(unacknowledged, Err(FenceError::Unreplicated { .. })),
        "the replica was stopped: {unacknowledged:?}"
    );
    let mut written = None;
    for _ in 0..20 {
        match fence.write(&request).await {
            Ok(outcome) => {
                written = Some(outcome);
                break;
            }
            Err(FenceError::Unreplicated { .. }) => {}
            Err(other) => panic!("sent to the promoted master: {other}"),
        }
    }
    let written = written.expect("acknowledged by the demoted master within 20 waits");
    assert!(
        written.is_duplicate(),
        "a retry replays the write it waited for: {written:?}"
    );
    assert_eq!(written.accepted().replicas_acknowledged, Some(1));
    assert_eq!(
        written.accepted().revision,
        Revision::new(3),
        "applied once (after the first write and the warm-up)"
    );
    let on_promoted = RedisFence::builder()
        .url(deployment.replica.url())
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        on_promoted
            .high_water_mark(&domain)
            .await
            .unwrap()
            .map(|m| m.get()),
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_documented_acl_works_and_a_missing_command_is_no_retry() {
    let Some(deployment) = Deployment::start("acl", &[]).await else {
        return;
    };
    let prefix = unique_prefix("sentinel-acl");
    // ACLs are not replicated: the users exist on both servers, as they would after a failover.
    let user = |name: &str, commands: &[&str]| {
        for server in [&deployment.master, &deployment.replica] {
            let mut args = vec!["ACL", "SETUSER", name, "on", ">secret", "resetkeys"];
            let keys = format!("~{prefix}:*");
            args.push(&keys);
            args.extend(["resetchannels", "-@all"]);
            args.extend(commands);
            assert_eq!(server.cli(&args), "OK");
        }
    };
    let all: Vec<&str> = fence_redis::FENCE_ACL_COMMANDS
        .split_whitespace()
        .chain(fence_redis::RETIRE_ACL_COMMANDS.split_whitespace())
        .collect();
    user("worker", &all);
    let without_role: Vec<&str> = all.iter().copied().filter(|c| *c != "+role").collect();
    user("norole", &without_role);

    let fence = deployment
        .fence(&prefix)
        .master_auth(Some("worker"), "secret")
        .connect()
        .await
        .unwrap();
    fence
        .write(&WriteRequest::put(d("acl"), t(1), "v"))
        .await
        .unwrap();
    let report = fence.check_permissions().await.unwrap();
    assert!(report.all_granted(), "{report}");

    let started = Instant::now();
    let refused = deployment
        .fence(&prefix)
        .master_auth(Some("norole"), "secret")
        .connect()
        .await;
    match refused {
        Err(
            error @ FenceError::Backend {
                kind: BackendErrorKind::PermissionDenied,
                ..
            },
        ) => {
            assert!(!error.is_retryable(), "{error}");
        }
        other => panic!("the master check needs ROLE: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not retried"
    );
}
