//! `fence qualify`: the torture engine and history checker of `fence-torture`, pointed at the
//! user's own endpoint, confined to names of its own under the configured prefix, schema or
//! topic, and removed afterwards. Before the run, the endpoint must enforce the conditions the
//! fence relies on (S3's conditional writes) and refuse a stale token; one that does not is
//! refused without a run.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use fence_conformance::proxy::TcpProxy;
use fence_core::{
    AppendRequest, Domain, FenceError, FencedStore, FencingToken, LeaseManager, MemoryLeases,
    Observed, Record, WriteRequest,
};
use fence_object_store::ObjectStoreFenceError;
use fence_torture::{
    check, engine, Faults, Profile, ProxyFaults, Report as Checked, Subject, Target,
};
use serde_json::{json, Value};

use crate::cleanup::Cleanup;
use crate::report::Report;
use crate::targets::Targets;
use crate::Backend;

/// How large a qualification run is.
#[derive(Args, Debug)]
pub(crate) struct QualifyArgs {
    /// Concurrent workers, each taking the lease and writing with its token after losing it.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Operations in all (rounded down to whole windows of 5 per worker).
    #[arg(long, default_value_t = 2000)]
    operations: usize,
    /// The seed of every random choice (printed; the same seed replays the same choices).
    #[arg(long)]
    seed: Option<u64>,
    /// Route the clients through a loopback fault proxy that cuts connections (before, during
    /// and after requests, and on replies), delays and black-holes them (plain-TCP endpoints
    /// with an explicit port: Redis, S3, PostgreSQL, MySQL, etcd, a DynamoDB endpoint; not TLS,
    /// whose certificate names the real host).
    #[arg(long)]
    network_faults: bool,
    /// Leave the run's keys, objects, schema, items or topics in place (to inspect them).
    #[arg(long)]
    keep: bool,
}

/// Everything a run needs of one backend.
struct Setup {
    /// What the run is confined to, for people.
    scope: String,
    target: Target,
    /// A second client, with nothing cached, for the preflight's stale write: its refusal
    /// must come from what the resource holds.
    fresh: Subject,
    cleanup: Cleanup,
    /// Kept alive for the run.
    _proxy: Option<Arc<TcpProxy>>,
}

/// A result before the run: a report to return at once.
type Prepared<T> = Result<T, Report>;

/// Runs `fence qualify BACKEND`.
pub(crate) async fn run(targets: &Targets, backend: Backend, args: &QualifyArgs) -> Report {
    if args.workers < 2 || args.operations < args.workers * 5 {
        return Report::usage(
            "qualify needs --workers of at least 2 and --operations of at least 5 per worker",
        );
    }
    let seed = args.seed.unwrap_or_else(clock_seed);
    let run_id = format!("{:08x}", seed as u32 ^ std::process::id());
    let setup = match prepare(targets, backend, &run_id, args).await {
        Ok(setup) => setup,
        Err(report) => return report,
    };
    let outcome = match preflight(&setup.target, &setup.fresh).await {
        Ok(()) => {
            let profile = profile(backend, seed, args);
            let run = engine::run(&profile, &setup.target).await;
            Ok((check(&run.history), run))
        }
        Err(refusal) => Err(refusal),
    };
    let cleaned = if args.keep {
        Ok(format!("kept: {}", setup.scope))
    } else {
        setup
            .cleanup
            .run()
            .await
            .map(|removed| format!("removed {removed} ({})", setup.scope))
            .map_err(|error| format!("could not remove everything ({}): {error}", setup.scope))
    };
    let name = backend.cli_name();
    let mut report = match outcome {
        Err(Refusal::Endpoint(reason)) => Report::not_qualified(
            json!({
                "backend": name, "scope": setup.scope, "seed": seed.to_string(),
                "verdict": "refused", "reason": reason,
            }),
            format!(
                "qualify {name}: REFUSED — {reason}\nno torture run: Fence cannot fence anything on this endpoint"
            ),
        ),
        Err(Refusal::Failed(report)) => report,
        Ok((checked, run)) => verdict(backend, &setup.scope, &checked, &run),
    };
    report.note("run", run_id.into(), None);
    let (text, failed) = match &cleaned {
        Ok(text) => (text.clone(), false),
        Err(text) => (text.clone(), true),
    };
    report.note(
        "cleanup",
        text.clone().into(),
        Some(&format!("cleanup: {text}")),
    );
    if failed {
        // Left-over state is a failure of its own, even after a good verdict.
        report.fail_if_done(
            "cleanup_failed",
            &format!("the run's state was not all removed: {text}"),
            true,
        );
    }
    report
}

/// Why the run did not take place.
enum Refusal {
    /// The endpoint ignores conditions or fencing.
    Endpoint(String),
    /// It could not be reached or answered an error.
    Failed(Report),
}

fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// The run's shape: windows of 5 operations per worker; leases long enough for the backend's
/// round trips (Kafka's transactions, etcd's one-second lease granularity).
fn profile(backend: Backend, seed: u64, args: &QualifyArgs) -> Profile {
    let windows = (args.operations / (args.workers * 5)).max(1) as u32;
    let ttl = match backend {
        Backend::Redis => Duration::from_millis(250),
        Backend::S3 | Backend::ObjectStore | Backend::Postgres | Backend::Mysql => {
            Duration::from_millis(300)
        }
        // moto serves one request at a time: a lease's grant and sightings queue behind the
        // workers' writes.
        Backend::Kafka | Backend::Dynamodb => Duration::from_millis(400),
        Backend::Etcd => Duration::from_secs(1),
    };
    let profile = Profile::new(seed, args.workers, windows, 5)
        .lease_ttl(ttl)
        .pause_probability(0.04);
    if args.network_faults {
        profile.faults(
            (Duration::from_millis(50), Duration::from_millis(250)),
            (Duration::from_millis(20), Duration::from_millis(200)),
        )
    } else {
        profile
    }
}

/// The clients of one backend: the main one, a fresh one for the preflight, one per worker
/// where clients cache marks (S3, Kafka: each worker then has its own, as processes would),
/// the lease backend, and what to remove afterwards.
struct Clients {
    subject: Subject,
    fresh: Subject,
    per_worker: Vec<Subject>,
    leases: Arc<dyn LeaseManager>,
    cleanup: Cleanup,
}

/// The clients of a SQL fence, whose run's tables `migrated` created (on failure the run's
/// schema or database is removed and the error reported).
async fn sql_clients(
    fence: Arc<dyn FencedStore>,
    leases: Arc<dyn LeaseManager>,
    cleanup: Cleanup,
    migrated: Result<(), FenceError>,
) -> Result<Clients, Report> {
    if let Err(error) = migrated {
        let _ = cleanup.run().await;
        return Err(Report::failed(&error));
    }
    Ok(Clients {
        leases,
        fresh: Subject::Register(fence.clone()),
        subject: Subject::Register(fence),
        per_worker: Vec::new(),
        cleanup,
    })
}

/// Connects to the backend under the run's own names, through the fault proxy if asked.
async fn prepare(
    targets: &Targets,
    backend: Backend,
    run_id: &str,
    args: &QualifyArgs,
) -> Prepared<Setup> {
    let mut scoped = targets.confined(run_id);
    let proxy = if args.network_faults {
        let upstream = scoped.endpoint_address(backend)?;
        let proxy = TcpProxy::start(upstream)
            .await
            .map_err(|e| Report::usage(format!("cannot start the fault proxy: {e}")))?;
        scoped.route_through(backend, proxy.address())?;
        Some(Arc::new(proxy))
    } else {
        None
    };
    let domain = |name: &str| Domain::new(name).map_err(|e| Report::usage(e.to_string()));
    let domain = if backend.is_log() {
        domain("qualify/log")?
    } else {
        domain("qualify/register")?
    };
    let clients = clients(targets, &scoped, backend, args.workers).await?;
    let mut target = match clients.subject {
        Subject::Register(store) => Target::new(store, clients.leases, domain),
        Subject::Log(log) => Target::log(log, clients.leases, domain),
        _ => return Err(Report::usage("qualify cannot drive this kind of target")),
    };
    target = target.with_clients_per_worker(clients.per_worker);
    if backend.refuses_from_cache() {
        // fence-s3 and fence-kafka refuse a token below a mark they saw accepted without a
        // request (DESIGN.md §3.4): such a refusal names that mark, maybe not the latest.
        target = target.with_refusals_from_cache();
    }
    if let Some(proxy) = &proxy {
        let faults: Arc<dyn Faults> = Arc::new(ProxyFaults::new(proxy.clone()));
        target = target.with_faults(faults);
    }
    Ok(Setup {
        scope: clients.cleanup.scope(),
        target,
        fresh: clients.fresh,
        cleanup: clients.cleanup,
        _proxy: proxy,
    })
}

/// Builds every client before creating anything at the resource, and removes what it created
/// when a later step fails.
async fn clients(
    targets: &Targets,
    scoped: &Targets,
    backend: Backend,
    workers: usize,
) -> Prepared<Clients> {
    Ok(match backend {
        Backend::Redis => {
            if targets.redis_behind_sentinel() {
                return Err(Report::usage(
                    "qualify redis behind Sentinel: name the master with FENCE_REDIS_URL instead (the clean-up removes the run's keys from the nodes it is given)",
                ));
            }
            let fence = scoped.redis().await?;
            let fresh = scoped.redis().await?;
            Clients {
                leases: Arc::new(fence.leases()),
                subject: Subject::Register(Arc::new(fence)),
                fresh: Subject::Register(Arc::new(fresh)),
                per_worker: Vec::new(),
                cleanup: Cleanup::redis(targets, scoped),
            }
        }
        Backend::S3 => {
            // The capability probe runs before each client's first request (the preflight's
            // claim, for the main one).
            let mut per_worker = Vec::new();
            for _ in 0..workers {
                per_worker.push(Subject::Register(Arc::new(scoped.s3().await?)));
            }
            Clients {
                subject: Subject::Register(Arc::new(scoped.s3().await?)),
                fresh: Subject::Register(Arc::new(scoped.s3().await?)),
                per_worker,
                leases: Arc::new(Observed::new(MemoryLeases::new())),
                cleanup: Cleanup::s3(scoped).await?,
            }
        }
        Backend::ObjectStore => {
            // Each worker its own client and version cache, as processes would have.
            let mut per_worker = Vec::new();
            for _ in 0..workers {
                per_worker.push(Subject::Register(Arc::new(scoped.object_store()?)));
            }
            let subject = scoped.object_store()?;
            Clients {
                cleanup: Cleanup::object_store(&subject),
                subject: Subject::Register(Arc::new(subject)),
                fresh: Subject::Register(Arc::new(scoped.object_store()?)),
                per_worker,
                leases: Arc::new(Observed::new(MemoryLeases::new())),
            }
        }
        Backend::Postgres => {
            let fence = scoped.postgres().await?;
            let migrated = fence_postgres::migrate(fence.pool(), fence.schema()).await;
            let leases = Arc::new(fence.leases());
            sql_clients(
                Arc::new(fence.clone()),
                leases,
                Cleanup::postgres(&fence),
                migrated,
            )
            .await?
        }
        Backend::Mysql => {
            let fence = scoped.mysql().await?;
            let migrated = fence_mysql::migrate(fence.pool(), fence.database()).await;
            let leases = Arc::new(fence.leases());
            sql_clients(
                Arc::new(fence.clone()),
                leases,
                Cleanup::mysql(&fence),
                migrated,
            )
            .await?
        }
        Backend::Etcd => {
            let etcd = scoped.etcd().await?;
            Clients {
                leases: Arc::new(etcd.leases()),
                subject: Subject::Register(Arc::new(etcd.fence())),
                fresh: Subject::Register(Arc::new(etcd.fence())),
                per_worker: Vec::new(),
                cleanup: Cleanup::etcd(&etcd),
            }
        }
        Backend::Dynamodb => {
            // The run's items live in its own namespace of the configured table, which
            // qualify never creates. Each worker its own client and cache, as processes
            // would have.
            let dynamodb = scoped.dynamodb().await?;
            let mut per_worker = Vec::new();
            for _ in 0..workers {
                per_worker.push(Subject::Register(Arc::new(
                    scoped.dynamodb().await?.fence(),
                )));
            }
            Clients {
                leases: Arc::new(dynamodb.leases()),
                subject: Subject::Register(Arc::new(dynamodb.fence())),
                fresh: Subject::Register(Arc::new(scoped.dynamodb().await?.fence())),
                per_worker,
                cleanup: Cleanup::dynamodb(&dynamodb),
            }
        }
        Backend::Kafka => {
            let mut per_worker = Vec::new();
            for _ in 0..workers {
                per_worker.push(Subject::Log(Arc::new(scoped.kafka()?)));
            }
            let (subject, fresh) = (scoped.kafka()?, scoped.kafka()?);
            Clients {
                subject: Subject::Log(Arc::new(subject)),
                fresh: Subject::Log(Arc::new(fresh)),
                per_worker,
                leases: Arc::new(Observed::new(MemoryLeases::new())),
                // Last: it creates the run's topics.
                cleanup: Cleanup::kafka(scoped).await?,
            }
        }
    })
}

/// A preflight failure: the endpoint refused (an object store's probe found conditions
/// ignored), or an error.
fn refusal(error: FenceError) -> Refusal {
    match conditions_ignored(&error) {
        Some(reason) => Refusal::Endpoint(reason),
        None => Refusal::Failed(Report::failed(&error)),
    }
}

/// The reason an object store endpoint was refused by the probe (conditions ignored, or no
/// compare-and-swap), if that is what `error` says.
fn conditions_ignored(error: &FenceError) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(s3 @ fence_s3::S3FenceError::ConditionsIgnored { .. }) =
            current.downcast_ref::<fence_s3::S3FenceError>()
        {
            return Some(s3.to_string());
        }
        if let Some(
            refused @ (ObjectStoreFenceError::ConditionsIgnored { .. }
            | ObjectStoreFenceError::ConditionsUnsupported { .. }),
        ) = current.downcast_ref::<ObjectStoreFenceError>()
        {
            return Some(refused.to_string());
        }
        source = current.source();
    }
    None
}

/// Before any run, on a domain of the run's own: the main client claims token 2; a fresh
/// client (nothing cached, so its answer comes from what the resource holds) must have token 1
/// refused; token 2 must then be accepted.
async fn preflight(target: &Target, fresh: &Subject) -> Result<(), Refusal> {
    let domain = Domain::new("qualify/preflight").map_err(|e| refusal(e.into()))?;
    let (one, two) = (
        FencingToken::MIN,
        FencingToken::new(2).map_err(|e| refusal(e.into()))?,
    );
    let batch = |token, value: &str| {
        AppendRequest::new(domain.clone(), token, vec![Record::new(value.to_owned())])
    };
    let stale = match (&target.subject, fresh) {
        (Subject::Register(store), Subject::Register(fresh)) => {
            store.claim(&domain, two).await.map_err(refusal)?;
            let stale = fresh
                .write(&WriteRequest::put(domain.clone(), one, "stale"))
                .await;
            store
                .write(&WriteRequest::put(domain.clone(), two, "current"))
                .await
                .map_err(refusal)?;
            stale.map(|_| ())
        }
        (Subject::Log(log), Subject::Log(fresh)) => {
            log.claim(&domain, two).await.map_err(refusal)?;
            let stale = fresh.append(&batch(one, "stale")).await.map(|_| ());
            log.append(&batch(two, "current")).await.map_err(refusal)?;
            stale
        }
        _ => {
            return Err(Refusal::Failed(Report::usage(
                "mismatched preflight clients",
            )))
        }
    };
    match stale {
        Err(FenceError::Fenced { .. }) => Ok(()),
        Ok(()) => Err(Refusal::Endpoint(format!(
            "it accepted a write with token {one} after token {two} was claimed: it ignores fencing"
        ))),
        Err(error) => Err(refusal(error)),
    }
}

/// The verdict per property, the figures, and the exit code (0 qualified, 8 not, 9
/// inconclusive).
fn verdict(backend: Backend, scope: &str, checked: &Checked, run: &fence_torture::Run) -> Report {
    let violated = checked.violated();
    let mut lines = vec![format!(
        "qualify {}: {scope}, seed {} ({} workers)",
        backend.cli_name(),
        run.seed,
        run.history
            .events
            .iter()
            .map(|e| e.worker)
            .filter(|w| *w != usize::MAX)
            .max()
            .map_or(0, |w| w + 1)
    )];
    let a = checked.ambiguity;
    let faults: Vec<String> = run
        .injected
        .faults
        .iter()
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect();
    lines.push(format!(
        "{} operations: {} accepted, {} fenced, {} replays, {} failed, {} ambiguous (applied {}, not applied {}, unresolved {}); {} pauses past the lease, {} takeovers, faults [{}]",
        checked.operations, checked.accepted, checked.fenced, checked.duplicates, checked.failed,
        a.total, a.applied, a.not_applied, a.unresolved, run.injected.pauses,
        run.injected.acquisitions, faults.join(", ")
    ));
    let properties: Vec<Value> = fence_torture::Property::ALL
        .iter()
        .filter(|p| applies(backend, **p))
        .map(|p| {
            let holds = !violated.contains(p);
            // Unsearched windows leave linearizability unproven, not holding.
            let unproven = holds
                && *p == fence_torture::Property::NotLinearizable
                && checked.windows_skipped > 0;
            let word = match (holds, unproven) {
                (false, _) => "VIOLATED",
                (true, true) => "inconclusive",
                (true, false) => "holds",
            };
            lines.push(format!("  {word:<12} {}", p.name()));
            json!({ "property": p.name(), "holds": holds && !unproven, "verdict": word.to_lowercase() })
        })
        .collect();
    if checked.windows_skipped > 0 {
        lines.push(format!(
            "  ({} of {} windows not searched for linearizability: too large for the search, or with no known start state)",
            checked.windows_skipped,
            checked.windows_checked + checked.windows_skipped
        ));
    }
    // A run that refused nobody, or accepted nothing, proves nothing.
    let exercised = checked.fenced > 0
        && checked.accepted > 0
        && run.history.final_state.is_some()
        && (!backend.is_log() || run.history.final_log.is_some());
    let verdict = match (checked.verdict(), exercised) {
        (fence_torture::Verdict::Holds, true) => "qualified",
        (fence_torture::Verdict::Holds | fence_torture::Verdict::Inconclusive, _) => "inconclusive",
        _ => "not qualified",
    };
    lines.push(format!("verdict: {verdict}"));
    if !exercised {
        lines.push(
            "  (the run accepted nothing, refused nobody or could not read the final state or log: raise --operations or check the endpoint)".into(),
        );
    }
    for violation in checked.violations.iter().take(3) {
        lines.push(violation.to_string());
    }
    let json = json!({
        "backend": backend.cli_name(),
        "scope": scope,
        "seed": run.seed.to_string(),
        "operations": checked.operations,
        "accepted": checked.accepted,
        "fenced": checked.fenced,
        "replays": checked.duplicates,
        "failed": checked.failed,
        "ambiguous": { "total": a.total, "applied": a.applied, "not_applied": a.not_applied, "unresolved": a.unresolved },
        "faults": run.injected.faults.iter().map(|(k, n)| (k.name().to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "properties": properties,
        "windows_skipped": checked.windows_skipped,
        "verdict": verdict,
    });
    match verdict {
        "qualified" => Report::done(json, lines.join("\n")),
        "inconclusive" => Report::inconclusive(json, lines.join("\n")),
        _ => Report::not_qualified(json, lines.join("\n")),
    }
}

/// The properties a backend's run can show: the log ones on Kafka only.
fn applies(backend: Backend, property: fence_torture::Property) -> bool {
    use fence_torture::Property::{FencedVisible, LogOrder};
    backend.is_log() || !matches!(property, LogOrder | FencedVisible)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Exit;
    use fence_torture::{History, SeenEntry, Violation};

    /// A run that accepted and refused, with its final state read.
    fn exercised() -> (Checked, fence_torture::Run) {
        let checked = Checked {
            operations: 10,
            accepted: 4,
            fenced: 3,
            windows_checked: 2,
            ..Checked::default()
        };
        let run = fence_torture::Run::new(
            1,
            History {
                final_state: Some((Some(3), SeenEntry::Absent)),
                ..History::default()
            },
        );
        (checked, run)
    }

    fn linearizable(json: &Value) -> &Value {
        json["properties"]
            .as_array()
            .and_then(|all| {
                all.iter()
                    .find(|p| p["property"] == fence_torture::Property::NotLinearizable.name())
            })
            .unwrap_or(&Value::Null)
    }

    #[test]
    fn unsearched_windows_are_inconclusive_not_qualified() {
        let (mut checked, run) = exercised();
        let proven = verdict(Backend::Redis, "test", &checked, &run);
        assert_eq!(proven.exit(), Exit::Done);
        assert_eq!(linearizable(proven.json())["verdict"], "holds");

        checked.windows_skipped = 1;
        let unproven = verdict(Backend::Redis, "test", &checked, &run);
        assert_eq!(unproven.exit(), Exit::Inconclusive);
        assert_eq!(unproven.json()["verdict"], "inconclusive");
        assert_eq!(linearizable(unproven.json())["verdict"], "inconclusive");
        assert_eq!(linearizable(unproven.json())["holds"], false);

        checked.violations.push(Violation {
            property: fence_torture::Property::NotLinearizable,
            detail: "no order explains the window".into(),
            window: Vec::new(),
        });
        let violated = verdict(Backend::Redis, "test", &checked, &run);
        assert_eq!(violated.exit(), Exit::NotQualified);
        assert_eq!(linearizable(violated.json())["verdict"], "violated");
    }
}
