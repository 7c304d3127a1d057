//! State kept per domain at each backend, measured on the real servers: after each of N
//! domains took a lease (where the backend has leases), claimed, wrote a 16-byte value with an
//! operation id and released its lease, the bytes the backend holds for them, divided by N.
//!
//! `fence-bench --state N` (scripts/bench runs it); LIFECYCLE.md shows the figures. A run
//! removes what it created (Redis and S3 domains retired, the schema and etcd prefix deleted;
//! Kafka's small topics stay).

use std::fmt::Write as _;
use std::time::Duration;

use fence_core::{
    Domain, Fence, FencedStore, FencingToken, LeaseManager, Observed, OperationId, OwnerId,
    Retirer, WriteRequest,
};
use fence_redis::redis;

use crate::measure::{done, run_id};

/// One measured kind of state.
#[derive(Debug)]
pub(crate) struct StateRow {
    pub(crate) backend: &'static str,
    /// What is kept.
    pub(crate) what: &'static str,
    /// How long it is kept.
    pub(crate) kept: &'static str,
    pub(crate) domains: usize,
    pub(crate) bytes_per_domain: Option<f64>,
    pub(crate) note: Option<String>,
}

impl StateRow {
    fn measured(
        backend: &'static str,
        what: &'static str,
        kept: &'static str,
        domains: usize,
        total_bytes: u64,
    ) -> Self {
        StateRow {
            backend,
            what,
            kept,
            domains,
            bytes_per_domain: Some(total_bytes as f64 / domains.max(1) as f64),
            note: None,
        }
    }

    fn failed(backend: &'static str, why: String) -> Self {
        StateRow {
            backend,
            what: "all",
            kept: "-",
            domains: 0,
            bytes_per_domain: None,
            note: Some(why),
        }
    }
}

const VALUE: &str = "0123456789abcdef";
const LEASE: Duration = Duration::from_secs(30);

fn domain(i: usize) -> Result<Domain, String> {
    Domain::new(format!("customer-{i:06}")).map_err(|e| e.to_string())
}

/// Runs `work` on each of `count` domains, 16 at a time: the state kept does not depend on
/// the order, and 100,000 domains one after the other would take most of an hour.
async fn each_domain<F, Fut>(count: usize, work: F) -> Result<(), String>
where
    F: Fn(Domain) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    use futures_util::{StreamExt, TryStreamExt};
    futures_util::stream::iter(0..count)
        .map(|i| {
            let domain = domain(i);
            let work = &work;
            async move { work(domain?).await }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// Leaves nothing behind: retires the run's domains (their leases were released).
async fn retire_all(fence: &dyn Retirer, domains: usize) -> Result<(), String> {
    each_domain(domains, |d| async move { done(fence.retire(&d).await) }).await
}

/// The workload on one domain: a lease (when `leases` is given), a claim, a write with an op
/// id, the lease released.
async fn workload(
    store: &dyn FencedStore,
    leases: Option<&dyn LeaseManager>,
    domain: &Domain,
    fallback_token: FencingToken,
) -> Result<(), String> {
    let owner = OwnerId::new("worker").map_err(|e| e.to_string())?;
    let lease = match leases {
        Some(leases) => Some(
            leases
                .acquire(domain, &owner, LEASE)
                .await
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let token = lease.as_ref().map_or(fallback_token, |l| l.token);
    store
        .claim(domain, token)
        .await
        .map_err(|e| e.to_string())?;
    let op = OperationId::new("write-1").map_err(|e| e.to_string())?;
    store
        .write(&WriteRequest::put(domain.clone(), token, VALUE).with_op_id(op))
        .await
        .map_err(|e| e.to_string())?;
    if let (Some(leases), Some(lease)) = (leases, &lease) {
        leases.release(lease).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(crate) async fn run(domains: usize, wanted: impl Fn(&str) -> bool) -> Vec<StateRow> {
    let mut rows = Vec::new();
    for backend in ["redis", "s3", "postgres", "etcd", "kafka"] {
        if !wanted(backend) {
            continue;
        }
        let measured = match backend {
            "redis" => redis_state(domains).await,
            "s3" => s3_state(domains).await,
            "postgres" => postgres_state(domains).await,
            "etcd" => etcd_state(domains).await,
            _ => kafka_state(domains.min(KAFKA_DOMAINS)).await,
        };
        match measured {
            Ok(measured) => rows.extend(measured),
            Err(why) => rows.push(StateRow::failed(backend, why)),
        }
    }
    rows
}

async fn redis_state(domains: usize) -> Result<Vec<StateRow>, String> {
    let url = std::env::var("FENCE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let prefix = format!("state-{}", run_id());
    let fence = fence_redis::RedisFence::builder()
        .url(&url)
        .prefix(&prefix)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let leases = fence.leases();
    each_domain(domains, |d| {
        let (fence, leases) = (&fence, &leases);
        async move { workload(fence, Some(leases), &d, FencingToken::MIN).await }
    })
    .await?;
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    // Every key of the run, by its suffix: state, seq, op ids.
    let mut sizes = [0u64; 3];
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        for key in keys {
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            let slot = if key.ends_with(":state") {
                0
            } else if key.ends_with(":seq") {
                1
            } else {
                2
            };
            sizes[slot] += bytes.unwrap_or(0);
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    retire_all(&fence, domains).await?;
    Ok(vec![
        StateRow::measured(
            "redis",
            "state hash (mark, entry, value)",
            "forever",
            domains,
            sizes[0],
        ),
        StateRow::measured(
            "redis",
            "sequence key (issuer)",
            "forever",
            domains,
            sizes[1],
        ),
        StateRow::measured(
            "redis",
            "op-id keys (one per remembered op)",
            "op-id retention (1 day)",
            domains,
            sizes[2],
        ),
    ])
}

async fn s3_state(domains: usize) -> Result<Vec<StateRow>, String> {
    let endpoint =
        std::env::var("FENCE_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8333".into());
    let client = fence_testkit::s3::client(&endpoint);
    let fence = fence_s3::S3Fence::builder()
        .client(client.clone())
        .bucket(fence_testkit::s3::BUCKET)
        .prefix(format!("state-{}/", run_id()))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let envelope = std::sync::atomic::AtomicU64::new(0);
    each_domain(domains, |d| {
        let (fence, client, envelope) = (&fence, &client, &envelope);
        async move {
            workload(fence, None, &d, FencingToken::MIN).await?;
            let head = client
                .head_object()
                .bucket(fence_testkit::s3::BUCKET)
                .key(fence.object_key(&d).map_err(|e| e.to_string())?)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let size = u64::try_from(head.content_length().unwrap_or(0)).unwrap_or(0);
            let beyond = size.saturating_sub(VALUE.len() as u64);
            envelope.fetch_add(beyond, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    })
    .await?;
    let envelope = envelope.into_inner();
    retire_all(&fence, domains).await?;
    Ok(vec![StateRow::measured(
        "s3",
        "object envelope (mark, nonce, op ids) beyond the value",
        "forever (the object)",
        domains,
        envelope,
    )])
}

async fn postgres_state(domains: usize) -> Result<Vec<StateRow>, String> {
    let url = std::env::var("FENCE_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://fence@127.0.0.1:5440/postgres".into());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    let schema = format!("state_{}", run_id());
    fence_postgres::migrate(&pool, &schema)
        .await
        .map_err(|e| e.to_string())?;
    let fence = fence_postgres::PostgresFence::builder(pool.clone(), &schema)
        .build()
        .map_err(|e| e.to_string())?;
    let leases = fence.leases();
    each_domain(domains, |d| {
        let (fence, leases) = (&fence, &leases);
        async move { workload(fence, Some(leases), &d, FencingToken::MIN).await }
    })
    .await?;
    sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.fence_marks, {schema}.fence_ops, {schema}.fence_counters, {schema}.fence_leases"))
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for (table, what, kept) in [
        (
            "fence_marks",
            "mark row (mark, entry, value) with its index",
            "forever",
        ),
        (
            "fence_counters",
            "counter row (issuer) with its index",
            "forever",
        ),
        (
            "fence_ops",
            "op-id rows with their indexes",
            "op-id retention (1,024 per domain)",
        ),
    ] {
        let bytes: i64 = sqlx::query_scalar("SELECT pg_total_relation_size($1::regclass)")
            .bind(format!("{schema}.{table}"))
            .fetch_one(&pool)
            .await
            .map_err(|e| e.to_string())?;
        rows.push(StateRow::measured(
            "postgres",
            what,
            kept,
            domains,
            u64::try_from(bytes).unwrap_or(0),
        ));
    }
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
    Ok(rows)
}

async fn etcd_state(domains: usize) -> Result<Vec<StateRow>, String> {
    let endpoints =
        std::env::var("FENCE_ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2479".into());
    let prefix = format!("/state-{}", run_id());
    let etcd = fence_etcd::Etcd::connect(&[endpoints.as_str()], None, &prefix)
        .await
        .map_err(|e| e.to_string())?;
    let (fence, leases) = (etcd.fence(), etcd.leases());
    each_domain(domains, |d| {
        let (fence, leases) = (&fence, &leases);
        async move { workload(fence, Some(leases), &d, FencingToken::MIN).await }
    })
    .await?;
    let mut client = etcd.client().clone();
    // Paged: one answer for 100,000 domains would pass the client's 4 MiB message limit.
    // The prefix's range end: its last byte plus one (the prefix is ASCII).
    let mut end = prefix.clone().into_bytes();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let (mut from, mut bytes) = (prefix.clone().into_bytes(), 0u64);
    loop {
        let page = client
            .get(
                from.clone(),
                Some(
                    fence_etcd::etcd_client::GetOptions::new()
                        .with_range(end.clone())
                        .with_limit(1000),
                ),
            )
            .await
            .map_err(|e| e.to_string())?;
        bytes += page
            .kvs()
            .iter()
            .map(|kv| (kv.key().len() + kv.value().len()) as u64)
            .sum::<u64>();
        match page.kvs().last() {
            Some(last) if page.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    client
        .delete(
            prefix.as_str(),
            Some(fence_etcd::etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(vec![StateRow::measured(
        "etcd",
        "store keys (state, ops), keys and values",
        "forever (and every revision until compaction)",
        domains,
        bytes,
    )])
}

/// Kafka claims are broker transactions (each a coordinator round trip): fewer domains suffice,
/// the records being the same size for each.
const KAFKA_DOMAINS: usize = 20;

async fn kafka_state(domains: usize) -> Result<Vec<StateRow>, String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let fence = fence_testkit::kafka::fence_on(&bootstrap, "state").await;
    for i in 0..domains {
        workload_log(&fence, &domain(i)?).await?;
    }
    let config = fence_testkit::kafka::client_config(&bootstrap);
    let mut ledger_bytes = 0u64;
    let mut header_bytes = 0u64;
    let data = fence
        .read_committed(0, 0)
        .await
        .map_err(|e| e.to_string())?;
    for record in &data {
        header_bytes += record
            .headers
            .iter()
            .map(|(name, value)| (name.len() + value.len()) as u64)
            .sum::<u64>();
    }
    // The ledger as any consumer reads it (its records carry no fence headers).
    let ledger = format!("{}-ledger", fence.data_topic());
    let mut config = config;
    config
        .set("group.id", format!("state-{}", run_id()))
        .set("auto.offset.reset", "earliest");
    let mut consumer = fence_kafka::FencedConsumer::new(&config, &[ledger.as_str()])
        .map_err(|e| e.to_string())?
        .allow_unfenced(true);
    let mut latest = std::collections::HashMap::new();
    while let Ok(record) = tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await {
        let record = record.map_err(|e| e.to_string())?;
        // The layout record's key starts with NUL; a domain's is the domain.
        if let Some(key) = record.key.clone().filter(|k| !k.starts_with(b"\0")) {
            latest.insert(key.clone(), (key.len() + record.value.len()) as u64);
        }
    }
    ledger_bytes += latest.values().sum::<u64>();
    Ok(vec![
        StateRow::measured(
            "kafka",
            "ledger record (mark, op ids), key and value, after compaction",
            "forever (compacted topic)",
            domains,
            ledger_bytes,
        ),
        StateRow::measured(
            "kafka",
            "fence headers of each data record (per record, not per domain)",
            "the data topic's retention",
            data.len(),
            header_bytes,
        ),
    ])
}

/// The log workload: a claim and an append of one record with an op id.
async fn workload_log(
    fence: &Observed<fence_kafka::KafkaFence>,
    domain: &Domain,
) -> Result<(), String> {
    use fence_core::{AppendRequest, FencedLog, Record};
    fence
        .claim(domain, FencingToken::MIN)
        .await
        .map_err(|e| e.to_string())?;
    let op = OperationId::new("write-1").map_err(|e| e.to_string())?;
    fence
        .append(
            &AppendRequest::new(domain.clone(), FencingToken::MIN, vec![Record::new(VALUE)])
                .with_op_id(op),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The rows as a Markdown table.
pub(crate) fn table(rows: &[StateRow]) -> String {
    let mut out = String::from(
        "| backend | state | kept | domains | bytes per domain |\n|---|---|---|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.backend,
            r.what,
            r.kept,
            r.domains,
            r.bytes_per_domain
                .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}")),
        );
    }
    for r in rows.iter().filter(|r| r.note.is_some()) {
        let _ = writeln!(
            out,
            "\n- {}: {}",
            r.backend,
            r.note.as_deref().unwrap_or_default()
        );
    }
    out
}
