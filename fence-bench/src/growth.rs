//! Growth curves: each backend's fenced-write latency and server CPU as the number of domains
//! grows, as one domain's op-id memory fills to its bound, and as values grow.
//!
//! `fence-bench --growth N` (domains up to N, by default 100,000). Every point is one writer
//! (concurrency 1) on a store that already holds the state the point names, interleaved with
//! the plain write of the same value where there is one (the same number of plain keys held),
//! so a cost that grows is seen to be the fence's or the server's. A run writes
//! `benchmarks/growth.json` and `benchmarks/growth.svg` and prints the tables; it removes what
//! it wrote.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use fence_core::{Domain, FencedStore, FencingToken, OpIdRetention, OperationId, WriteRequest};
use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use crate::growth_targets::{self, Target};
use crate::measure::{compare, done, sample, Plan, Side};

/// The three curves, as the report names them.
pub(crate) const DOMAINS: &str = "domains held";
pub(crate) const OP_IDS: &str = "op ids held by the domain";
pub(crate) const VALUE: &str = "value bytes";

/// The series of a backend: the fence (its cache sized for the run), the plain write, and the
/// fence with the adapter's default cache.
pub(crate) const FENCED: &str = "fenced";
pub(crate) const PLAIN: &str = "plain";
pub(crate) const DEFAULT_CACHE: &str = "fenced, default cache";

/// The value sizes of the value curve.
const VALUE_SIZES: [usize; 3] = [1024, 64 * 1024, 1024 * 1024];

/// Writes in flight while a point's state is written (the order does not matter to it).
const FILL_CONCURRENCY: usize = 32;

/// One point of one backend's curve.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Point {
    pub(crate) backend: String,
    /// [`FENCED`], [`PLAIN`] or [`DEFAULT_CACHE`].
    #[serde(default)]
    pub(crate) variant: String,
    pub(crate) curve: String,
    /// Domains held, op ids held, or value bytes.
    pub(crate) x: u64,
    pub(crate) p50_us: Option<f64>,
    pub(crate) p99_us: Option<f64>,
    pub(crate) server_cpu_us: Option<f64>,
    pub(crate) client_cpu_us: Option<f64>,
    pub(crate) note: Option<String>,
}

impl Point {
    fn measured(backend: &str, variant: &str, curve: &str, x: u64, side: &Side) -> Self {
        let per_op =
            |ns: Option<u64>| (side.ops() > 0).then_some(ns? as f64 / 1e3 / side.ops() as f64);
        Point {
            backend: backend.to_owned(),
            variant: variant.to_owned(),
            curve: curve.to_owned(),
            x,
            p50_us: side.p(0.5),
            p99_us: side.p(0.99),
            server_cpu_us: per_op(side.cost.server_ns),
            client_cpu_us: per_op(Some(side.cost.client_ns)),
            note: side
                .failures
                .first()
                .map(|first| format!("{} failed writes, first: {first}", side.failures.len())),
        }
    }

    fn note(backend: &str, curve: &str, x: u64, note: impl Into<String>) -> Self {
        Point {
            backend: backend.to_owned(),
            variant: FENCED.to_owned(),
            curve: curve.to_owned(),
            x,
            note: Some(note.into()),
            ..Point::default()
        }
    }
}

impl Point {
    /// The line the point belongs to: the backend, and the variant when it is not the fence.
    pub(crate) fn series(&self) -> String {
        if self.variant.is_empty() || self.variant == FENCED {
            self.backend.clone()
        } else {
            format!("{} ({})", self.backend, self.variant)
        }
    }
}

/// The domain counts of the domain curve, up to `max`.
pub(crate) fn domain_counts(max: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = [1, 1_000, max]
        .into_iter()
        .filter(|&n| n >= 1 && n <= max)
        .collect();
    counts.dedup();
    counts
}

fn domain(stem: &str, i: usize) -> Result<Domain, String> {
    Domain::new(format!("{stem}{i}")).map_err(|e| e.to_string())
}

/// How a point samples: one writer, a warm-up batch and `rounds` recorded batches.
fn plan(value_bytes: usize, rounds: usize) -> Plan {
    let batch = match value_bytes {
        0..=4096 => 100,
        4097..=131_072 => 40,
        _ => 10,
    };
    Plan {
        rounds,
        batch,
        concurrency: 1,
        group: 1,
    }
}

/// Rounds per point: the memory adapter answers in nanoseconds and needs more to be seen.
fn rounds(backend: &str) -> usize {
    if backend == "memory" {
        50
    } else {
        5
    }
}

/// The backends of the main run the curves leave out, and why (said in the report, not
/// skipped in silence).
const NOT_MEASURED: [(&str, &str); 3] = [
    (
        "outbox",
        "not measured: an outbox transition is a fenced Redis write plus its effects",
    ),
    (
        "object_store",
        "not measured: the S3 curve is the same protocol on the same SeaweedFS",
    ),
    (
        "kafka",
        "not measured: a domain's first append follows its claim, a broker transaction with the ledger (a takeover took 270 ms at 8921612), so 100,000 domains would take about 7.5 hours",
    ),
];

/// Runs every curve on every wanted backend.
pub(crate) async fn run(max_domains: usize, wanted: impl Fn(&str) -> bool) -> Vec<Point> {
    let mut points: Vec<Point> = NOT_MEASURED
        .iter()
        .filter(|(backend, _)| wanted(backend))
        .map(|(backend, why)| Point::note(backend, DOMAINS, 0, *why))
        .collect();
    for backend in growth_targets::BACKENDS {
        if !wanted(backend) {
            continue;
        }
        eprintln!("growth: {backend}…");
        let target = match growth_targets::connect(backend, max_domains).await {
            Ok(target) => target,
            Err(why) => {
                points.push(Point::note(backend, DOMAINS, 0, why));
                continue;
            }
        };
        points.extend(curves(backend, &target, max_domains).await);
        if let Err(why) = target.cleanup.await {
            points.push(Point::note(backend, DOMAINS, 0, format!("cleanup: {why}")));
        }
    }
    points
}

async fn curves(backend: &str, target: &Target, max_domains: usize) -> Vec<Point> {
    let mut points = Vec::new();
    match domain_curve(backend, target, max_domains).await {
        Ok(curve) => points.extend(curve),
        Err(why) => points.push(Point::note(backend, DOMAINS, 0, why)),
    }
    match op_id_curve(backend, target).await {
        Ok(curve) => points.extend(curve),
        Err(why) => points.push(Point::note(backend, OP_IDS, 0, why)),
    }
    points.extend(value_curve(backend, target, max_domains).await);
    points
}

/// Writes 1 KiB to each domain in `from..to`, and to the plain keys of the same numbers
/// (tokens of 1: every write is accepted).
async fn fill_domains(
    target: &Target,
    domains: &[Domain],
    from: usize,
    to: usize,
) -> Result<(), String> {
    let value = Bytes::from(vec![b'g'; 1024]);
    let store = target.store.as_ref();
    futures_util::stream::iter(from..to)
        .map(|i| {
            let request = domains
                .get(i)
                .map(|d| WriteRequest::put(d.clone(), FencingToken::MIN, value.clone()));
            let plain = (target.plain)(i, value.clone());
            async move {
                let request = request.ok_or_else(|| format!("no domain {i}"))?;
                done(store.write(&request).await)?;
                plain.await
            }
        })
        .buffer_unordered(FILL_CONCURRENCY)
        .try_collect::<()>()
        .await
}

/// The fenced write of `value` to domain `index` of `domains`, boxed so each series is one
/// closure type.
fn fenced_write(
    store: &Arc<dyn FencedStore>,
    domains: &[Domain],
    index: usize,
    value: &Bytes,
) -> futures_util::future::BoxFuture<'static, crate::measure::OpResult> {
    let Some(domain) = domains.get(index) else {
        return Box::pin(async move { Err(format!("no domain {index}")) });
    };
    let (store, request) = (
        store.clone(),
        WriteRequest::put(domain.clone(), FencingToken::MIN, value.clone()),
    );
    Box::pin(async move { done(store.write(&request).await) })
}

/// `store`'s writes and the plain writes of `value` interleaved, the domain (and plain key,
/// past `plain_offset`) of operation `i` given by `key`: one point of each series.
async fn fenced_and_plain(
    target: &Target,
    store: Arc<dyn FencedStore>,
    plan: Plan,
    domains: Arc<Vec<Domain>>,
    key: impl Fn(usize) -> usize + Copy + Send + Sync + 'static,
    plain_offset: usize,
    value: Bytes,
) -> (Side, Side) {
    let (fenced_value, plain) = (value.clone(), target.plain.clone());
    compare(
        plan,
        &target.probe,
        move |i| fenced_write(&store, &domains, key(i), &fenced_value),
        move |i| plain(plain_offset + key(i), value.clone()),
    )
    .await
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A stride prime to `n`: stepping by it walks all `n` domains before it comes back to one,
/// so measured writes land on domains the run has not just written.
pub(crate) fn stride(n: usize) -> usize {
    [7_919, 7_927, 7_933]
        .into_iter()
        .find(|&s| gcd(s, n) == 1)
        .unwrap_or(1)
}

/// Latency and server CPU of 1 KiB writes spread over `n` domains the store already holds,
/// for each `n` of [`domain_counts`], beside the plain write over as many keys; the store
/// grows from one point to the next. Where `n` passes the adapter's default cache, the fence
/// with that cache too, from empty.
async fn domain_curve(
    backend: &str,
    target: &Target,
    max_domains: usize,
) -> Result<Vec<Point>, String> {
    let counts = domain_counts(max_domains);
    let largest = counts.last().copied().unwrap_or(1);
    let domains: Arc<Vec<Domain>> = Arc::new(
        (0..largest)
            .map(|i| domain("g", i))
            .collect::<Result<_, _>>()?,
    );
    let (mut held, mut points) = (0, Vec::new());
    for n in counts {
        fill_domains(target, &domains, held, n).await?;
        held = n;
        let step = stride(n);
        let key = move |i: usize| i.wrapping_mul(step) % n;
        let plan = plan(1024, rounds(backend));
        let value = Bytes::from(vec![b'w'; 1024]);
        let (fenced, plain) = fenced_and_plain(
            target,
            target.store.clone(),
            plan,
            domains.clone(),
            key,
            0,
            value.clone(),
        )
        .await;
        points.push(Point::measured(backend, FENCED, DOMAINS, n as u64, &fenced));
        points.push(Point::measured(backend, PLAIN, DOMAINS, n as u64, &plain));
        // The default cache where the domains outnumber it: a fresh fence, as a cache that
        // held `capacity` of `n` domains written evenly would hit at most `capacity / n`.
        if let Some((store, capacity)) = target.default_cache.as_ref().filter(|(_, c)| n > *c) {
            let (side, _) =
                fenced_and_plain(target, store.clone(), plan, domains.clone(), key, 0, value).await;
            let mut point = Point::measured(backend, DEFAULT_CACHE, DOMAINS, n as u64, &side);
            point.note = point.note.or_else(|| {
                Some(format!(
                    "the default cache holds {capacity} domains; measured from empty (a warm one would hit at most {capacity} in {n})"
                ))
            });
            points.push(point);
        }
    }
    Ok(points)
}

/// The op-id memory's bound, and the fill levels measured: empty, half, full. A time window
/// (Redis) has no count: the same levels as the default per-domain bound are measured.
fn op_id_levels(retention: OpIdRetention) -> Option<[usize; 3]> {
    let bound = match retention {
        OpIdRetention::PerDomain(n) => n,
        OpIdRetention::Window(_) => fence_core::DEFAULT_OP_ID_RETENTION,
        _ => return None,
    };
    Some([0, bound / 2, bound])
}

fn op_write(domain: &Domain, op: String, value: &Bytes) -> Result<WriteRequest, String> {
    let op = OperationId::new(op).map_err(|e| e.to_string())?;
    Ok(WriteRequest::put(domain.clone(), FencingToken::MIN, value.clone()).with_op_id(op))
}

/// How the op-id curve samples: each measured write goes to a domain of its own, filled
/// beforehand, so every write meets exactly the level's op ids.
fn op_id_plan(backend: &str) -> Plan {
    Plan {
        rounds: if backend == "memory" { 10 } else { 3 },
        batch: if backend == "memory" { 50 } else { 20 },
        concurrency: 1,
        group: 1,
    }
}

/// Latency and server CPU of 1 KiB writes with a new op id on domains that already hold
/// none, half their bound and their bound of op ids (at the bound each write evicts the
/// oldest: the steady state).
async fn op_id_curve(backend: &str, target: &Target) -> Result<Vec<Point>, String> {
    let Some(levels) = op_id_levels(target.store.capabilities().op_id_retention) else {
        return Ok(vec![Point::note(
            backend,
            OP_IDS,
            0,
            "the adapter remembers no op ids",
        )]);
    };
    let value = Bytes::from(vec![b'o'; 1024]);
    let plan = op_id_plan(backend);
    let writes = plan.batch * (plan.rounds + 1);
    let mut points = Vec::new();
    for held in levels {
        let domains: Arc<Vec<Domain>> = Arc::new(
            (0..writes)
                .map(|i| domain(&format!("ops{held}-"), i))
                .collect::<Result<_, _>>()?,
        );
        // Domains side by side; each one's op ids one after the other, remembered in order.
        let store = target.store.as_ref();
        futures_util::stream::iter(domains.iter())
            .map(|d| {
                let value = value.clone();
                async move {
                    for j in 0..held {
                        done(
                            store
                                .write(&op_write(d, format!("fill-{j}"), &value)?)
                                .await,
                        )?;
                    }
                    Ok::<(), String>(())
                }
            })
            .buffer_unordered(FILL_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        let (store, value, domains) = (target.store.clone(), value.clone(), domains.clone());
        let side = sample(plan, &target.probe, move |i| {
            let request = domains
                .get(i)
                .ok_or_else(|| format!("no domain {i}"))
                .and_then(|d| op_write(d, "measured".to_owned(), &value));
            let store = store.clone();
            async move { done(store.write(&request?).await) }
        })
        .await;
        points.push(Point::measured(backend, FENCED, OP_IDS, held as u64, &side));
    }
    Ok(points)
}

/// Latency and server CPU of writes of 1 KiB, 64 KiB and 1 MiB over up to 16 domains (as many
/// as a batch writes, so the warm-up writes each before the recorded rounds); plain keys
/// from `first_plain_key`, past the domain curve's. A size past the adapter's declared limit
/// is a note saying so.
async fn value_curve(backend: &str, target: &Target, first_plain_key: usize) -> Vec<Point> {
    let limit = target.store.capabilities().max_value_bytes;
    let mut points = Vec::new();
    for size in VALUE_SIZES {
        if let Some(limit) = limit.filter(|&limit| size > limit) {
            points.push(Point::note(
                backend,
                VALUE,
                size as u64,
                format!("over the adapter's limit of {limit} bytes"),
            ));
            continue;
        }
        let plan = plan(size, rounds(backend));
        let count = plan.batch.min(16);
        let domains: Result<Vec<Domain>, String> = (0..count)
            .map(|i| domain(&format!("v{size}-"), i))
            .collect();
        let domains = match domains {
            Ok(domains) => Arc::new(domains),
            Err(why) => return vec![Point::note(backend, VALUE, size as u64, why)],
        };
        // One set of plain keys per size: 16 apart, the sizes being powers of two.
        let plain_offset = first_plain_key + 16 * size.trailing_zeros() as usize;
        let value = Bytes::from(vec![b'v'; size]);
        let (fenced, plain) = fenced_and_plain(
            target,
            target.store.clone(),
            plan,
            domains,
            move |i| i % count,
            plain_offset,
            value,
        )
        .await;
        points.push(Point::measured(
            backend,
            FENCED,
            VALUE,
            size as u64,
            &fenced,
        ));
        points.push(Point::measured(backend, PLAIN, VALUE, size as u64, &plain));
    }
    points
}

fn cell(value: Option<f64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(v) if v < 10.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.0}"),
    }
}

/// A point's x as the tables and the chart label it.
pub(crate) fn x_label(curve: &str, x: u64) -> String {
    if curve == VALUE {
        match x {
            x if x >= 1 << 20 => format!("{} MiB", x >> 20),
            x => format!("{} KiB", x >> 10),
        }
    } else {
        x.to_string()
    }
}

/// The op-id curve's columns: each backend's bound differs, so its levels line up by rank.
const OP_ID_COLUMNS: [&str; 3] = ["empty", "half full", "full"];

/// The measured points of one curve, with the column each falls in, and the columns' labels.
pub(crate) fn columns<'a>(
    points: &'a [Point],
    curve: &str,
) -> (Vec<String>, Vec<(usize, &'a Point)>) {
    let measured: Vec<&Point> = points
        .iter()
        .filter(|p| p.curve == curve && p.p50_us.is_some())
        .collect();
    if curve == OP_IDS {
        let placed = measured
            .iter()
            .map(|p| {
                let rank = measured
                    .iter()
                    .filter(|q| q.series() == p.series() && q.x < p.x)
                    .count();
                (rank, *p)
            })
            .collect();
        return (OP_ID_COLUMNS.map(str::to_owned).to_vec(), placed);
    }
    let mut xs: Vec<u64> = measured.iter().map(|p| p.x).collect();
    xs.sort_unstable();
    xs.dedup();
    let placed = measured
        .iter()
        .filter_map(|p| Some((xs.iter().position(|x| *x == p.x)?, *p)))
        .collect();
    (xs.iter().map(|x| x_label(curve, *x)).collect(), placed)
}

/// The distinct items, in the order first seen.
pub(crate) fn first_seen<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut seen = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

/// The points as one Markdown table per curve: p50 latency, then server CPU, per point.
pub(crate) fn table(points: &[Point]) -> String {
    let mut out = String::new();
    for curve in [DOMAINS, OP_IDS, VALUE] {
        let (labels, placed) = columns(points, curve);
        let _ = write!(
            out,
            "\n{curve}: p50 µs / server CPU µs per write\n\n| backend |"
        );
        for label in &labels {
            let _ = write!(out, " {label} |");
        }
        let _ = write!(out, "\n|---|{}\n", "---:|".repeat(labels.len()));
        for name in first_seen(placed.iter().map(|(_, p)| p.series())) {
            let row: Vec<&(usize, &Point)> =
                placed.iter().filter(|(_, p)| p.series() == name).collect();
            if curve == OP_IDS {
                let full = row.iter().map(|(_, p)| p.x).max().unwrap_or(0);
                let _ = write!(out, "| {name} (0 … {full}) |");
            } else {
                let _ = write!(out, "| {name} |");
            }
            for column in 0..labels.len() {
                let _ = match row.iter().find(|(c, _)| *c == column) {
                    Some((_, p)) => {
                        write!(out, " {} / {} |", cell(p.p50_us), cell(p.server_cpu_us))
                    }
                    None => write!(out, " - |"),
                };
            }
            out.push('\n');
        }
    }
    let notes: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let note = p.note.as_ref()?;
            Some(format!(
                "- {} / {} {}: {note}",
                p.series(),
                p.curve,
                x_label(&p.curve, p.x)
            ))
        })
        .collect();
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}

/// Writes the points to `benchmarks/growth.json` and draws `benchmarks/growth.svg`.
pub(crate) fn publish(points: &[Point], dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(points).map_err(|e| e.to_string())?;
    let path = dir.join("growth.json");
    std::fs::write(&path, json).map_err(|e| format!("could not write {}: {e}", path.display()))?;
    crate::growth_chart::render(points, &dir.join("growth.svg"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_counts_stop_at_the_largest_asked_for() {
        assert_eq!(domain_counts(100_000), vec![1, 1_000, 100_000]);
        assert_eq!(domain_counts(1_000), vec![1, 1_000]);
        assert_eq!(domain_counts(500), vec![1, 500]);
        assert_eq!(domain_counts(1), vec![1]);
    }

    #[test]
    fn op_id_levels_are_empty_half_and_full() {
        assert_eq!(
            op_id_levels(OpIdRetention::PerDomain(128)),
            Some([0, 64, 128])
        );
        let window = OpIdRetention::Window(std::time::Duration::from_secs(60));
        assert_eq!(op_id_levels(window), Some([0, 512, 1024]));
        assert_eq!(op_id_levels(OpIdRetention::None), None);
    }

    #[test]
    fn the_stride_walks_every_domain_before_coming_back() {
        for n in [1, 2, 1_000, 7_919, 7_919 * 7_927, 100_000] {
            let step = stride(n);
            assert_eq!(gcd(step, n), 1, "stride {step} for {n}");
        }
        let n = 7_919;
        let mut seen: Vec<usize> = (0..n).map(|i| i * stride(n) % n).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n);
    }

    #[tokio::test]
    async fn every_curve_is_measured_on_the_memory_adapter() -> Result<(), String> {
        // Eight op ids per domain: the curve's levels are then 0, 4 and 8.
        let target = growth_targets::connect("memory", 1_000).await?;
        let target = growth_targets::Target {
            store: Arc::new(fence_core::Observed::new(
                fence_core::MemoryFence::new().with_op_id_retention(8),
            )),
            ..target
        };
        let points = curves("memory", &target, 1_000).await;
        let measured = |curve: &str, variant: &str| {
            points
                .iter()
                .filter(|p| p.curve == curve && p.variant == variant)
                .filter(|p| p.p50_us.is_some_and(|us| us > 0.0))
                .map(|p| p.x)
                .collect::<Vec<_>>()
        };
        assert_eq!(measured(DOMAINS, FENCED), vec![1, 1_000]);
        assert_eq!(measured(DOMAINS, PLAIN), vec![1, 1_000]);
        assert_eq!(measured(OP_IDS, FENCED), vec![0, 4, 8]);
        assert_eq!(measured(OP_IDS, PLAIN), Vec::<u64>::new());
        assert_eq!(measured(VALUE, FENCED), vec![1024, 65_536, 1_048_576]);
        assert_eq!(measured(VALUE, PLAIN), vec![1024, 65_536, 1_048_576]);
        // The memory fence has no cache: no default-cache series.
        assert_eq!(measured(DOMAINS, DEFAULT_CACHE), Vec::<u64>::new());
        assert!(points.iter().all(|p| p.note.is_none()), "{points:?}");
        let table = table(&points);
        assert!(table.contains("| memory |"), "{table}");
        assert!(table.contains("| memory (plain) |"), "{table}");
        Ok(())
    }

    #[test]
    fn a_point_without_a_measurement_shows_as_a_dash_and_its_note_is_listed() {
        let points = vec![
            Point {
                backend: "etcd".into(),
                curve: VALUE.into(),
                x: 1024,
                p50_us: Some(900.0),
                server_cpu_us: Some(120.0),
                ..Point::default()
            },
            Point::note(
                "etcd",
                VALUE,
                1 << 20,
                "over the adapter's limit of 1000 bytes",
            ),
        ];
        let table = table(&points);
        assert!(table.contains("| etcd | 900 / 120 |"), "{table}");
        assert!(
            table.contains("- etcd / value bytes 1 MiB: over the adapter's limit"),
            "{table}"
        );
    }
}
