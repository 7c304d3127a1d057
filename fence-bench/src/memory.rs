//! MemoryFence write vs an unfenced sharded map insert.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fence_core::{Domain, FencedStore, FencingToken, MemoryFence, Observed, WriteRequest};

use crate::measure::{compare, done, Plan};
use crate::probe::Probe;
use crate::report::Row;

/// The unfenced baseline: the same sharding and key type, no token check.
struct ShardedMap {
    shards: Vec<Mutex<HashMap<Domain, Bytes>>>,
    hasher: RandomState,
}

impl ShardedMap {
    fn insert(&self, key: &Domain, value: Bytes) {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        if let Some(shard) = self.shards.get(index) {
            shard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone(), value);
        }
    }
}

fn domains(count: usize) -> Result<Arc<Vec<Domain>>, String> {
    (0..count)
        .map(|i| Domain::new(format!("bench/memory/{i}")).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .map(Arc::new)
}

pub(crate) async fn run() -> Vec<Row> {
    let mut rows = Vec::new();
    for telemetry in [true, false] {
        for threads in [1, 2] {
            for count in [1, 10_000] {
                match compare_writes(telemetry, threads, count).await {
                    Ok(row) => rows.push(row),
                    Err(e) => return vec![Row::note("memory", "write", e)],
                }
            }
        }
    }
    rows.push(bytes_per_domain().await);
    rows
}

/// `MemoryFence` writes (through the [`Observed`] layer, or on the bare adapter, which reports
/// nothing) vs inserts into the sharded map, on `threads` threads over `count` domains.
async fn compare_writes(telemetry: bool, threads: usize, count: usize) -> Result<Row, String> {
    let domains = domains(count)?;
    // Leaked, so the fenced side borrows it as the map's side does: an `Arc` cloned per
    // operation would add a contended reference count the baseline does not pay.
    let fence: &'static Observed<MemoryFence> =
        Box::leak(Box::new(Observed::new(MemoryFence::new())));
    let map = Arc::new(ShardedMap {
        shards: (0..fence_core::DEFAULT_SHARDS)
            .map(|_| Mutex::default())
            .collect(),
        hasher: RandomState::new(),
    });
    let value = Bytes::from_static(&[7u8; 64]);
    let token = FencingToken::MIN;
    let plan = Plan {
        rounds: 10,
        batch: 200_000,
        concurrency: threads,
        group: 1000,
    };
    let (fd, fv) = (domains.clone(), value.clone());
    let (ud, uv) = (domains.clone(), value.clone());
    let (fenced, unfenced) = compare(
        plan,
        &Probe::default(),
        move |i| {
            let request = WriteRequest::put(fd[i % fd.len()].clone(), token, fv.clone());
            async move {
                let outcome = if telemetry {
                    fence.write(&request).await
                } else {
                    fence.get_ref().write(&request).await
                };
                done(outcome)
            }
        },
        move |i| {
            map.insert(&ud[i % ud.len()], uv.clone());
            async { Ok(()) }
        },
    )
    .await;
    let case = if telemetry {
        format!("write vs sharded map insert, {count} domain(s)")
    } else {
        format!("write without telemetry (bare adapter) vs sharded map insert, {count} domain(s)")
    };
    let mut row = Row::new("memory", case, threads, &fenced, &unfenced);
    // Nanoseconds say more than the table's tenths of a microsecond here.
    for (name, us) in [
        ("fenced ns/write", row.fenced_p50_us),
        ("unfenced ns/write", row.unfenced_p50_us),
    ] {
        if let Some(us) = us {
            row.figures.insert(name.to_owned(), us * 1e3);
        }
    }
    Ok(row)
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resident memory per tracked domain: 200 000 domains with a 16-byte value each.
async fn bytes_per_domain() -> Row {
    const DOMAINS: usize = 200_000;
    let before = resident_bytes();
    let fence = MemoryFence::new();
    let value = Bytes::from_static(&[1u8; 16]);
    for i in 0..DOMAINS {
        if let Ok(domain) = Domain::new(format!("domain-{i:08}")) {
            let _ = fence
                .write(&WriteRequest::put(domain, FencingToken::MIN, value.clone()))
                .await;
        }
    }
    let after = resident_bytes();
    let note = match (before, after) {
        (Some(b), Some(a)) => format!(
            "≈ {} bytes per tracked domain (resident memory grew {} KiB for {} domains with 15-byte names and 16-byte values; {} tracked)",
            a.saturating_sub(b) / DOMAINS as u64,
            a.saturating_sub(b) / 1024,
            DOMAINS,
            fence.tracked_domains()
        ),
        _ => "resident memory not readable on this system".to_owned(),
    };
    Row::note("memory", "bytes per tracked domain", note)
}
