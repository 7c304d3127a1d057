//! Interleaved measurement of a fenced and an unfenced variant of one operation.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::probe::{Cost, Probe};

/// The concurrencies the network backends' main cases run at.
pub(crate) const CONCURRENCY: [usize; 4] = [1, 4, 16, 64];

/// The result of an operation under test.
pub(crate) type OpResult = Result<(), String>;

/// Milliseconds since the Unix epoch: names a run's keys, prefixes and topics.
pub(crate) fn run_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// An operation's result as the measurement needs it: done, or why not.
pub(crate) fn done<T, E: std::fmt::Display>(result: Result<T, E>) -> OpResult {
    result.map(|_| ()).map_err(|e| e.to_string())
}

/// Latencies and wall time of one variant over all rounds.
#[derive(Debug, Default)]
pub(crate) struct Side {
    latencies_us: Vec<f64>,
    wall: Duration,
    ops: usize,
    pub(crate) failures: Vec<String>,
    /// Server and client CPU, and Redis commands, of the recorded batches.
    pub(crate) cost: Cost,
}

impl Side {
    pub(crate) fn p(&self, quantile: f64) -> Option<f64> {
        if self.latencies_us.is_empty() {
            return None;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_by(f64::total_cmp);
        let index = ((sorted.len() - 1) as f64 * quantile).round() as usize;
        sorted.get(index).copied()
    }

    pub(crate) fn ops(&self) -> usize {
        self.ops
    }

    pub(crate) fn ops_per_second(&self) -> Option<f64> {
        (self.wall.as_secs_f64() > 0.0).then(|| self.ops as f64 / self.wall.as_secs_f64())
    }
}

/// How a case is sampled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Rounds after the warm-up round; each runs one batch of each variant.
    pub(crate) rounds: usize,
    /// Operations per batch.
    pub(crate) batch: usize,
    /// Concurrent tasks sharing a batch.
    pub(crate) concurrency: usize,
    /// Operations timed together (for sub-microsecond operations; 1 elsewhere).
    pub(crate) group: usize,
}

async fn run_batch<F, Fut>(
    plan: Plan,
    probe: &Probe,
    offset: usize,
    op: &Arc<F>,
    side: &mut Side,
    record: bool,
) where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = OpResult> + Send,
{
    let per_task = plan.batch.div_ceil(plan.concurrency);
    let before = if record {
        Some(probe.sample().await)
    } else {
        None
    };
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..plan.concurrency {
        let op = op.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_task / plan.group.max(1) + 1);
            let mut failures = Vec::new();
            let mut done = 0;
            while done < per_task {
                let group = plan.group.max(1).min(per_task - done);
                let begin = Instant::now();
                for i in 0..group {
                    // Tasks take interleaved indexes: with a batch that is a multiple of the
                    // concurrency, task `t` always gets indexes ≡ t (mod concurrency), so cases
                    // can give each task keys of its own.
                    if let Err(error) = op(offset + (done + i) * plan.concurrency + task).await {
                        failures.push(error);
                    }
                }
                latencies.push(begin.elapsed().as_secs_f64() * 1e6 / group as f64);
                done += group;
            }
            (latencies, failures, per_task)
        });
    }
    let mut ops = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((latencies, failures, count)) => {
                if record {
                    side.latencies_us.extend(latencies);
                    side.failures.extend(failures);
                    ops += count;
                }
            }
            Err(error) => side.failures.push(format!("task failed: {error}")),
        }
    }
    let wall = started.elapsed();
    if let Some(before) = before {
        side.cost.add(&before.until(&probe.sample().await));
        side.wall += wall;
        side.ops += ops;
    }
}

/// Runs a warm-up round, then `plan.rounds` rounds; each round runs one batch of each variant,
/// alternating which goes first, so that drift on a shared machine hits both alike.
/// `probe` is sampled before and after every recorded batch.
pub(crate) async fn compare<FA, FutA, FB, FutB>(
    plan: Plan,
    probe: &Probe,
    fenced: FA,
    unfenced: FB,
) -> (Side, Side)
where
    FA: Fn(usize) -> FutA + Send + Sync + 'static,
    FutA: Future<Output = OpResult> + Send,
    FB: Fn(usize) -> FutB + Send + Sync + 'static,
    FutB: Future<Output = OpResult> + Send,
{
    let (fenced, unfenced) = (Arc::new(fenced), Arc::new(unfenced));
    let (mut a, mut b) = (Side::default(), Side::default());
    for round in 0..=plan.rounds {
        let record = round > 0;
        let offset = round * plan.batch;
        if round % 2 == 0 {
            run_batch(plan, probe, offset, &fenced, &mut a, record).await;
            run_batch(plan, probe, offset, &unfenced, &mut b, record).await;
        } else {
            run_batch(plan, probe, offset, &unfenced, &mut b, record).await;
            run_batch(plan, probe, offset, &fenced, &mut a, record).await;
        }
    }
    (a, b)
}

/// Runs a warm-up round, then `plan.rounds` batches of one operation (a curve's point, which
/// has no unfenced twin); `probe` is sampled around every recorded batch.
pub(crate) async fn sample<F, Fut>(plan: Plan, probe: &Probe, op: F) -> Side
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = OpResult> + Send,
{
    let op = Arc::new(op);
    let mut side = Side::default();
    for round in 0..=plan.rounds {
        run_batch(plan, probe, round * plan.batch, &op, &mut side, round > 0).await;
    }
    side
}
