//! The backends the growth curves run on: each a fenced store on a fresh namespace of the
//! service `scripts/services` runs, the plain write it is compared with, its server's CPU
//! probe, and how to remove what the run wrote (100,000 domains are too many to leave behind).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fence_core::{FencedStore, MemoryFence, Observed};
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_redis::redis;
use futures_util::future::BoxFuture;

use crate::measure::{done, run_id, OpResult};
use crate::probe::Probe;

/// The backends `--growth` measures, in the order of the report.
pub(crate) const BACKENDS: [&str; 7] = [
    "memory", "redis", "s3", "postgres", "mysql", "etcd", "dynamodb",
];

/// The unfenced write of the same value to key `i` of the run's namespace.
pub(crate) type Plain = Arc<dyn Fn(usize, Bytes) -> BoxFuture<'static, OpResult> + Send + Sync>;

/// A fenced store under test.
pub(crate) struct Target {
    /// The fence, its cache (where it has one) sized to hold every domain of the run.
    pub(crate) store: Arc<dyn FencedStore>,
    /// The same fence with the adapter's default cache, where a cache bounds the steady state.
    pub(crate) default_cache: Option<(Arc<dyn FencedStore>, usize)>,
    pub(crate) plain: Plain,
    pub(crate) probe: Probe,
    /// Removes the run's namespace (a future does nothing until awaited).
    pub(crate) cleanup: BoxFuture<'static, Result<(), String>>,
}

fn text<E: std::fmt::Display>(error: E) -> String {
    error.to_string()
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The target for `backend` (one of [`BACKENDS`]), its cache sized for `domains`.
pub(crate) async fn connect(backend: &str, domains: usize) -> Result<Target, String> {
    let run = run_id();
    match backend {
        "memory" => Ok(memory_target()),
        "redis" => redis_target(run).await,
        "s3" => s3_target(run, domains).await,
        "postgres" => postgres_target(run).await,
        "mysql" => mysql_target(run).await,
        "etcd" => etcd_target(run, domains).await,
        "dynamodb" => dynamodb_target(run, domains).await,
        other => Err(format!("no growth target for `{other}`")),
    }
}

/// An insert into a sharded map with the fence's shard count: what the memory fence's
/// bookkeeping is compared with.
fn memory_target() -> Target {
    let hasher = RandomState::new();
    let shards: Arc<Vec<Mutex<HashMap<usize, Bytes>>>> = Arc::new(
        (0..fence_core::DEFAULT_SHARDS)
            .map(|_| Mutex::default())
            .collect(),
    );
    let plain: Plain = Arc::new(move |i, value| {
        let index = (hasher.hash_one(i) % shards.len() as u64) as usize;
        if let Some(shard) = shards.get(index) {
            shard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(i, value);
        }
        Box::pin(async { Ok(()) })
    });
    Target {
        store: Arc::new(Observed::new(MemoryFence::new())),
        default_cache: None,
        plain,
        probe: Probe::default(),
        cleanup: Box::pin(async { Ok(()) }),
    }
}

async fn redis_target(run: u128) -> Result<Target, String> {
    let url = env("FENCE_REDIS_URL", "redis://127.0.0.1:6390");
    let prefix = format!("growth-{run}");
    let fence = fence_redis::RedisFence::builder()
        .url(&url)
        .prefix(&prefix)
        .connect()
        .await
        .map_err(text)?;
    let probe = Probe::redis(&url, &crate::redis::pid_file(&url)).await;
    let client = redis::Client::open(url.as_str()).map_err(text)?;
    let raw = redis::aio::ConnectionManager::new(client.clone())
        .await
        .map_err(text)?;
    let plain_prefix = format!("{prefix}-plain-");
    let plain: Plain = Arc::new(move |i, value| {
        let (mut conn, key) = (raw.clone(), format!("{plain_prefix}{i}"));
        Box::pin(async move {
            done(
                redis::cmd("SET")
                    .arg(key)
                    .arg(value.as_ref())
                    .query_async::<()>(&mut conn)
                    .await,
            )
        })
    });
    let cleanup = async move {
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(text)?;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(5000)
                .query_async(&mut conn)
                .await
                .map_err(text)?;
            if !keys.is_empty() {
                redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(text)?;
            }
            cursor = next;
            if cursor == 0 {
                return Ok(());
            }
        }
    };
    Ok(Target {
        store: Arc::new(fence),
        default_cache: None,
        plain,
        probe,
        cleanup: Box::pin(cleanup),
    })
}

async fn s3_target(run: u128, domains: usize) -> Result<Target, String> {
    let endpoint = env("FENCE_S3_ENDPOINT", "http://127.0.0.1:8333");
    let bucket = env("FENCE_S3_BUCKET", fence_testkit::s3::BUCKET);
    let client = fence_testkit::s3::client(&endpoint);
    let prefix = format!("growth-{run}/");
    let builder = || {
        fence_s3::S3Fence::builder()
            .client(client.clone())
            .bucket(&bucket)
            .prefix(&prefix)
    };
    let fence = builder()
        .cache_capacity(domains)
        .connect()
        .await
        .map_err(text)?;
    let default_cache = builder().connect().await.map_err(text)?;
    let (put, put_bucket, plain_prefix) =
        (client.clone(), bucket.clone(), format!("{prefix}plain/"));
    let plain: Plain = Arc::new(move |i, value| {
        let request = put
            .put_object()
            .bucket(&put_bucket)
            .key(format!("{plain_prefix}{i}"))
            .body(value.into());
        Box::pin(async move { done(request.send().await) })
    });
    let cleanup = async move {
        use fence_s3::aws_sdk_s3::types::{Delete, ObjectIdentifier};
        loop {
            let page = client
                .list_objects_v2()
                .bucket(&bucket)
                .prefix(&prefix)
                .max_keys(1000)
                .send()
                .await
                .map_err(text)?;
            let objects = page
                .contents()
                .iter()
                .filter_map(|o| ObjectIdentifier::builder().key(o.key()?).build().ok())
                .collect::<Vec<_>>();
            if objects.is_empty() {
                return Ok(());
            }
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(text)?;
            client
                .delete_objects()
                .bucket(&bucket)
                .delete(delete)
                .send()
                .await
                .map_err(text)?;
        }
    };
    Ok(Target {
        store: Arc::new(fence),
        default_cache: Some((Arc::new(default_cache), fence_s3::DEFAULT_CACHE_CAPACITY)),
        plain,
        probe: Probe::server("seaweedfs/weed.pid"),
        cleanup: Box::pin(cleanup),
    })
}

async fn postgres_target(run: u128) -> Result<Target, String> {
    let url = env(
        "FENCE_POSTGRES_URL",
        "postgres://fence@127.0.0.1:5440/postgres",
    );
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await
        .map_err(text)?;
    let schema = format!("growth_{run}");
    fence_postgres::migrate(&pool, &schema)
        .await
        .map_err(text)?;
    let fence = fence_postgres::PostgresFence::builder(pool.clone(), &schema)
        .build()
        .map_err(text)?;
    let (plain, cleanup) = sql_plain(
        pool,
        format!("CREATE TABLE {schema}.plain (id bigint PRIMARY KEY, payload bytea NOT NULL)"),
        format!(
            "INSERT INTO {schema}.plain VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload"
        ),
        format!("DROP SCHEMA {schema} CASCADE"),
    )
    .await?;
    Ok(Target {
        store: Arc::new(fence),
        default_cache: None,
        plain,
        probe: Probe::server("postgres/postgres.pid"),
        cleanup,
    })
}

async fn mysql_target(run: u128) -> Result<Target, String> {
    let url = env(
        "FENCE_MYSQL_URL",
        "mysql://fence:fence@127.0.0.1:3340/fence",
    );
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await
        .map_err(text)?;
    let database = format!("growth_{run}");
    fence_mysql::migrate(&pool, &database).await.map_err(text)?;
    let fence = fence_mysql::MySqlFence::builder(pool.clone(), &database)
        .build()
        .map_err(text)?;
    let (plain, cleanup) = sql_plain(
        pool,
        format!("CREATE TABLE {database}.plain (id BIGINT PRIMARY KEY, payload LONGBLOB NOT NULL)"),
        format!(
            "INSERT INTO {database}.plain VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE payload = VALUES(payload)"
        ),
        format!("DROP DATABASE {database}"),
    )
    .await?;
    Ok(Target {
        store: Arc::new(fence),
        default_cache: None,
        plain,
        probe: Probe::server("mariadb/mariadbd.pid"),
        cleanup,
    })
}

/// A SQL target's plain write and cleanup: the table `create` makes, written by `upsert`
/// (`id`, `payload`), and `drop` run when the run is done.
async fn sql_plain<DB>(
    pool: sqlx::Pool<DB>,
    create: String,
    upsert: String,
    drop: String,
) -> Result<(Plain, BoxFuture<'static, Result<(), String>>), String>
where
    DB: sqlx::Database,
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Vec<u8>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::raw_sql(&create).execute(&pool).await.map_err(text)?;
    let (upsert, plain_pool) = (Arc::new(upsert), pool.clone());
    let plain: Plain = Arc::new(move |i, value| {
        let (sql, pool) = (upsert.clone(), plain_pool.clone());
        Box::pin(async move {
            let id = i64::try_from(i).map_err(|_| format!("plain key {i} is past BIGINT"))?;
            done(
                sqlx::query(sql.as_str())
                    .bind(id)
                    .bind(value.to_vec())
                    .execute(&pool)
                    .await,
            )
        })
    });
    let cleanup = async move {
        sqlx::query(drop.as_str())
            .execute(&pool)
            .await
            .map(|_| ())
            .map_err(text)
    };
    Ok((plain, Box::pin(cleanup)))
}

async fn etcd_target(run: u128, domains: usize) -> Result<Target, String> {
    let endpoints = env("FENCE_ETCD_ENDPOINTS", "http://127.0.0.1:2479");
    let prefix = format!("/growth-{run}");
    let etcd = fence_etcd::Etcd::connect(&[endpoints.as_str()], None, &prefix)
        .await
        .map_err(text)?;
    let (put, plain_prefix) = (etcd.client().clone(), format!("{prefix}-plain/"));
    let plain: Plain = Arc::new(move |i, value| {
        let (mut client, key) = (put.clone(), format!("{plain_prefix}{i}"));
        Box::pin(async move { done(client.put(key, value.to_vec(), None).await) })
    });
    let mut client = etcd.client().clone();
    // Not compacted: the etcd may serve others (a test suite's watches from older revisions).
    // Its history keeps the run's tombstones until etcd's own compaction; on etcd 3.4 they
    // slowed later fenced writes (BENCHMARKS.md, growth curves): run it on an etcd of its own.
    let cleanup = async move {
        client
            .delete(
                prefix.as_str(),
                Some(fence_etcd::etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .map(|_| ())
            .map_err(text)
    };
    Ok(Target {
        store: Arc::new(etcd.fence_builder().cache_capacity(domains).build()),
        default_cache: Some((Arc::new(etcd.fence()), fence_etcd::DEFAULT_CACHE_CAPACITY)),
        plain,
        probe: Probe::server("etcd/etcd.pid"),
        cleanup: Box::pin(cleanup),
    })
}

async fn dynamodb_target(run: u128, domains: usize) -> Result<Target, String> {
    let endpoint = env("FENCE_DYNAMODB_ENDPOINT", "http://127.0.0.1:8042");
    let table = format!("growth-{run}");
    let client = fence_testkit::dynamodb::client(&endpoint);
    let dynamodb =
        fence_dynamodb::DynamoDb::new(client.clone(), table.as_str(), "growth").map_err(text)?;
    dynamodb.create_table().await.map_err(text)?;
    let (update, plain_table) = (client.clone(), table.clone());
    let plain: Plain = Arc::new(move |i, value| {
        // The least a fence on DynamoDB sends, as fence-bench's DynamoDB case compares.
        let request = update
            .update_item()
            .table_name(plain_table.as_str())
            .key("pk", AttributeValue::S(format!("plain/{i}")))
            .condition_expression("attribute_not_exists(#m) OR #m <= :t")
            .update_expression("SET #m = :t, #v = :v")
            .expression_attribute_names("#m", "mark")
            .expression_attribute_names("#v", "val")
            .expression_attribute_values(":t", AttributeValue::N("1".into()))
            .expression_attribute_values(":v", AttributeValue::B(value.to_vec().into()));
        Box::pin(async move { done(request.send().await) })
    });
    let sized = dynamodb
        .fence_builder()
        .cache_capacity(domains)
        .build()
        .map_err(text)?;
    let cleanup = async move {
        client
            .delete_table()
            .table_name(table.as_str())
            .send()
            .await
            .map(|_| ())
            .map_err(text)
    };
    Ok(Target {
        store: Arc::new(sized),
        default_cache: Some((
            Arc::new(dynamodb.fence()),
            fence_dynamodb::DEFAULT_CACHE_CAPACITY,
        )),
        plain,
        probe: Probe::server("dynamodb/moto.pid"),
        cleanup: Box::pin(cleanup),
    })
}
