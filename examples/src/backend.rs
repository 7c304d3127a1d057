//! Which resource and lease manager a demo runs on, chosen with `--backend NAME`.

use std::sync::Arc;

use fence_core::{LeaseManager, MemoryFence, MemoryLeases};

use crate::Resource;

/// A backend the demos can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The embedded in-memory resource and leases: no servers needed.
    Memory,
    /// Redis: `FENCE_REDIS_URL` or `FENCE_REDIS_CLUSTER`, else `redis://127.0.0.1:6379`.
    Redis,
    /// S3: `FENCE_S3_ENDPOINT` / `FENCE_S3_BUCKET` / `FENCE_S3_ACCESS_KEY` / `FENCE_S3_SECRET_KEY`.
    /// Leases come from memory: S3 has none, and the object fences on its own.
    S3,
    /// Kafka: `FENCE_KAFKA_BOOTSTRAP` (default `127.0.0.1:9092`); topics created per run.
    /// Leases come from memory; the broker and the fence ledger enforce the token.
    Kafka,
    /// PostgreSQL: `FENCE_POSTGRES_URL`, else `postgres://postgres@127.0.0.1:5432/postgres`;
    /// the fence's tables in schema `fence_demo`. Leases in PostgreSQL too.
    Postgres,
}

impl Backend {
    /// Every backend, in the order `--help` lists them.
    pub const ALL: &'static [(&'static str, Backend)] = &[
        ("memory", Backend::Memory),
        ("redis", Backend::Redis),
        ("s3", Backend::S3),
        ("kafka", Backend::Kafka),
        ("postgres", Backend::Postgres),
    ];

    /// Reads `--backend NAME` (or `--backend=NAME`) from the arguments; memory by default.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Backend, String> {
        let mut args = args.into_iter();
        let mut chosen = None;
        while let Some(arg) = args.next() {
            let name = match arg.strip_prefix("--backend=") {
                Some(name) => name.to_owned(),
                None if arg == "--backend" => args
                    .next()
                    .ok_or_else(|| "--backend needs a name".to_owned())?,
                None => return Err(format!("unknown argument `{arg}`")),
            };
            chosen = Some(Self::named(&name)?);
        }
        Ok(chosen.unwrap_or(Backend::Memory))
    }

    fn named(name: &str) -> Result<Backend, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown backend `{name}`; choose one of: {}",
                    known.join(", ")
                )
            })
    }

    /// Connects to the backend and returns its store and lease manager.
    pub async fn open(self) -> Result<DemoBackend, Box<dyn std::error::Error>> {
        match self {
            Backend::Memory => Ok(DemoBackend {
                description: "memory (embedded, no servers)".into(),
                resource: Resource::Store(Arc::new(MemoryFence::new())),
                leases: Arc::new(MemoryLeases::new()),
            }),
            Backend::Redis => {
                let fence = redis_builder()?.connect().await?;
                Ok(DemoBackend {
                    description: format!("redis at {}", fence.target()),
                    leases: Arc::new(fence.leases()),
                    resource: Resource::Store(Arc::new(fence)),
                })
            }
            Backend::S3 => {
                let fence = s3_fence_from_env()?.connect().await?;
                Ok(DemoBackend {
                    description: format!("s3 bucket `{}` (leases in memory)", fence.bucket()),
                    resource: Resource::Store(Arc::new(fence)),
                    leases: Arc::new(MemoryLeases::new()),
                })
            }
            Backend::Kafka => {
                let fence = kafka_fence_for_run("demo").await?;
                Ok(DemoBackend {
                    description: format!("kafka topic `{}` (leases in memory)", fence.data_topic()),
                    resource: Resource::Log(Arc::new(fence)),
                    leases: Arc::new(MemoryLeases::new()),
                })
            }
            Backend::Postgres => {
                let fence = postgres_fence().await?;
                Ok(DemoBackend {
                    description: format!("postgres schema `{}`", fence.schema()),
                    leases: Arc::new(fence.leases()),
                    resource: Resource::Store(Arc::new(fence)),
                })
            }
        }
    }
}

/// The schema the PostgreSQL examples keep the fence's tables in.
pub const POSTGRES_SCHEMA: &str = "fence_demo";

/// A PostgreSQL fence on `FENCE_POSTGRES_URL` (else `postgres://postgres@127.0.0.1:5432/postgres`)
/// with its tables in [`POSTGRES_SCHEMA`], created if missing (an example may; an application
/// runs `fence_postgres::migrate` from its migrations).
pub async fn postgres_fence() -> Result<fence_postgres::PostgresFence, Box<dyn std::error::Error>> {
    let url = std::env::var("FENCE_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(&url)
        .await
        .map_err(|e| format!("connecting to PostgreSQL (set FENCE_POSTGRES_URL): {e}"))?;
    fence_postgres::migrate(&pool, POSTGRES_SCHEMA).await?;
    Ok(fence_postgres::PostgresFence::new(pool, POSTGRES_SCHEMA)?)
}

/// A Redis fence builder from the environment, or for `redis://127.0.0.1:6379`.
pub fn redis_builder() -> Result<fence_redis::RedisFenceBuilder, fence_core::FenceError> {
    if std::env::var_os("FENCE_REDIS_URL").is_some()
        || std::env::var_os("FENCE_REDIS_CLUSTER").is_some()
    {
        fence_redis::RedisFenceBuilder::from_env()
    } else {
        Ok(fence_redis::RedisFence::builder().url("redis://127.0.0.1:6379"))
    }
}

/// An S3 fence builder from `FENCE_S3_ENDPOINT` (path-style, for S3-compatible servers),
/// `FENCE_S3_BUCKET`, `FENCE_S3_ACCESS_KEY`, `FENCE_S3_SECRET_KEY` and `FENCE_S3_REGION`.
pub fn s3_fence_from_env() -> Result<fence_s3::S3FenceBuilder, fence_core::FenceError> {
    use fence_s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let var = |name: &str| {
        std::env::var(name)
            .map_err(|_| fence_core::InvalidInput::Configuration(format!("set {name}")))
    };
    let region = std::env::var("FENCE_S3_REGION").unwrap_or_else(|_| "us-east-1".into());
    let mut config = fence_s3::aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(Credentials::new(
            var("FENCE_S3_ACCESS_KEY")?,
            var("FENCE_S3_SECRET_KEY")?,
            None,
            None,
            "env",
        ));
    if let Ok(endpoint) = std::env::var("FENCE_S3_ENDPOINT") {
        config = config.endpoint_url(endpoint).force_path_style(true);
    }
    let client = fence_s3::aws_sdk_s3::Client::from_conf(config.build());
    Ok(fence_s3::S3Fence::builder()
        .client(client)
        .bucket(var("FENCE_S3_BUCKET")?))
}

/// A Kafka fence on fresh topics (`<name>-<time>` and its ledger) of `FENCE_KAFKA_BOOTSTRAP`.
pub async fn kafka_fence_for_run(
    name: &str,
) -> Result<fence_kafka::KafkaFence, Box<dyn std::error::Error>> {
    use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use fence_kafka::rdkafka::client::DefaultClientContext;
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let mut config = fence_kafka::rdkafka::config::ClientConfig::new();
    config.set("bootstrap.servers", &bootstrap);
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let topic = format!("{name}-{run}");
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    for result in admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await?
    {
        result.map_err(|(topic, code)| format!("creating topic {topic}: {code}"))?;
    }
    Ok(fence_kafka::KafkaFence::builder(config)
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .connect()
        .await?)
}

/// An opened backend.
#[derive(Debug)]
pub struct DemoBackend {
    /// What is running, for the demo's header.
    pub description: String,
    /// The fenced resource.
    pub resource: Resource,
    /// Where leases and their tokens come from.
    pub leases: Arc<dyn LeaseManager>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn backend_defaults_to_memory_and_parses_both_spellings() {
        assert_eq!(Backend::from_args(args(&[])), Ok(Backend::Memory));
        assert_eq!(
            Backend::from_args(args(&["--backend", "memory"])),
            Ok(Backend::Memory)
        );
        assert_eq!(
            Backend::from_args(args(&["--backend=memory"])),
            Ok(Backend::Memory)
        );
    }

    #[test]
    fn unknown_backends_and_arguments_are_refused() {
        let unknown = Backend::from_args(args(&["--backend", "etcd"]));
        assert!(
            unknown.is_err_and(|e| e.contains("unknown backend `etcd`") && e.contains("memory"))
        );
        assert!(Backend::from_args(args(&["--backend"])).is_err());
        assert!(Backend::from_args(args(&["--verbose"])).is_err());
    }
}
