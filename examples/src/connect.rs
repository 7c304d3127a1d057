//! Connecting the examples to their servers: the environment's settings, else the project's
//! own servers (`scripts/services up` starts them at these addresses), with timeouts of a few
//! seconds and errors that name the address tried and the variable to set.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::MemoryLeases;

use crate::{Backend, DemoBackend, Resource};

/// Connects a server backend of the demos.
pub(crate) async fn open(backend: Backend) -> Result<DemoBackend, Box<dyn Error>> {
    Ok(match backend {
        Backend::Redis => {
            let fence = redis_fence().await?;
            DemoBackend {
                description: format!("redis at {}", fence.target()),
                leases: Arc::new(fence.leases()),
                resource: Resource::Store(Arc::new(fence)),
                kafka: None,
            }
        }
        Backend::S3 => {
            let fence = s3_fence().await?;
            DemoBackend {
                description: format!("s3 bucket `{}` (leases in memory)", fence.bucket()),
                resource: Resource::Store(Arc::new(fence)),
                leases: Arc::new(MemoryLeases::new()),
                kafka: None,
            }
        }
        Backend::Kafka => {
            let fence = kafka_fence_for_run("demo").await?;
            DemoBackend {
                description: format!("kafka topic `{}` (leases in memory)", fence.data_topic()),
                resource: Resource::Log(Arc::new(fence.clone())),
                leases: Arc::new(MemoryLeases::new()),
                kafka: Some(fence),
            }
        }
        Backend::Postgres => {
            let fence = postgres_fence().await?;
            DemoBackend {
                description: format!("postgres schema `{}`", fence.schema()),
                leases: Arc::new(fence.leases()),
                resource: Resource::Store(Arc::new(fence)),
                kafka: None,
            }
        }
        Backend::Memory => return Err("the memory backend needs no server".into()),
    })
}

/// The addresses `scripts/services up` starts the project's servers on (what
/// `scripts/services env` prints): the examples' defaults.
pub mod local {
    /// Standalone Redis.
    pub const REDIS_URL: &str = "redis://127.0.0.1:6390";
    /// SeaweedFS's S3 endpoint.
    pub const S3_ENDPOINT: &str = "http://127.0.0.1:8333";
    /// Its bucket.
    pub const S3_BUCKET: &str = "fence-test";
    /// Its test access key (a local test server's, not a secret).
    pub const S3_ACCESS_KEY: &str = "fence-test-access";
    /// Its test secret key (a local test server's, not a secret).
    pub const S3_SECRET_KEY: &str = "fence-test-secret";
    /// The Kafka broker (noida-db).
    pub const KAFKA_BOOTSTRAP: &str = "127.0.0.1:19092";
    /// PostgreSQL.
    pub const POSTGRES_URL: &str = "postgres://fence@127.0.0.1:5440/postgres";
}

/// How long an example waits for a server before it says it could not reach it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A server an example could not use, with where it tried and what to set.
#[derive(Debug)]
pub struct Unreachable {
    what: &'static str,
    address: String,
    variable: &'static str,
    source: Box<dyn Error + Send + Sync>,
}

impl Unreachable {
    fn new(
        what: &'static str,
        address: &str,
        variable: &'static str,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        Unreachable {
            what,
            address: without_credentials(address),
            variable,
            source: source.into(),
        }
    }
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not use {} at {}: {}\n  set {} to your server, or start the project's servers: scripts/services up",
            self.what, self.address, self.source, self.variable
        )
    }
}

impl Error for Unreachable {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// URLs (comma-separated) as shown to people: any `user:password@` replaced.
fn without_credentials(urls: &str) -> String {
    let one = |url: &str| {
        let Some((scheme, rest)) = url.split_once("://") else {
            return url.to_owned();
        };
        let authority_end = rest.find('/').unwrap_or(rest.len());
        match rest[..authority_end].rfind('@') {
            Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
            None => url.to_owned(),
        }
    };
    urls.split(',').map(one).collect::<Vec<_>>().join(",")
}

/// The variable's value, else the project's default.
fn setting(variable: &str, default: &str) -> String {
    std::env::var(variable)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// A Redis fence: `FENCE_REDIS_URL` or `FENCE_REDIS_CLUSTER`, else the project's Redis.
pub async fn redis_fence() -> Result<fence_redis::RedisFence, Unreachable> {
    let cluster = setting("FENCE_REDIS_CLUSTER", "");
    let (builder, address, variable) = if cluster.is_empty() {
        let url = setting("FENCE_REDIS_URL", local::REDIS_URL);
        (
            fence_redis::RedisFence::builder().url(&url),
            url,
            "FENCE_REDIS_URL",
        )
    } else {
        let nodes: Vec<String> = cluster.split(',').map(str::to_owned).collect();
        (
            fence_redis::RedisFence::builder().cluster(nodes),
            cluster.clone(),
            "FENCE_REDIS_CLUSTER",
        )
    };
    builder
        .connection_timeout(CONNECT_TIMEOUT)
        .connect()
        .await
        .map_err(|e| Unreachable::new("Redis", &address, variable, e))
}

/// An S3 fence: `FENCE_S3_ENDPOINT` (path-style, for S3-compatible servers), `FENCE_S3_BUCKET`,
/// `FENCE_S3_ACCESS_KEY`, `FENCE_S3_SECRET_KEY`, `FENCE_S3_REGION`, else the project's
/// SeaweedFS and its test credentials; connected (the capability probe ran).
pub async fn s3_fence() -> Result<fence_s3::S3Fence, Unreachable> {
    use fence_s3::aws_sdk_s3::config::timeout::TimeoutConfig;
    use fence_s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let endpoint = setting("FENCE_S3_ENDPOINT", local::S3_ENDPOINT);
    let region = setting("FENCE_S3_REGION", "us-east-1");
    let config = fence_s3::aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(Credentials::new(
            setting("FENCE_S3_ACCESS_KEY", local::S3_ACCESS_KEY),
            setting("FENCE_S3_SECRET_KEY", local::S3_SECRET_KEY),
            None,
            None,
            "env",
        ))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_timeout(Duration::from_secs(10))
                .build(),
        )
        .endpoint_url(&endpoint)
        .force_path_style(true);
    let client = fence_s3::aws_sdk_s3::Client::from_conf(config.build());
    let bucket = setting("FENCE_S3_BUCKET", local::S3_BUCKET);
    fence_s3::S3Fence::builder()
        .client(client)
        .bucket(&bucket)
        .connect()
        .await
        .map_err(|e| {
            Unreachable::new(
                "S3",
                &format!("{endpoint} (bucket {bucket})"),
                "FENCE_S3_ENDPOINT",
                e,
            )
        })
}

/// A Kafka fence on fresh topics (`<name>-<time>` and its ledger) of `FENCE_KAFKA_BOOTSTRAP`,
/// else the project's broker. [`delete_kafka_topics`] removes them.
pub async fn kafka_fence_for_run(name: &str) -> Result<fence_kafka::KafkaFence, Unreachable> {
    use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use fence_kafka::rdkafka::client::DefaultClientContext;
    let bootstrap = setting("FENCE_KAFKA_BOOTSTRAP", local::KAFKA_BOOTSTRAP);
    let unreachable = |e: Box<dyn Error + Send + Sync>| {
        Unreachable::new("Kafka", &bootstrap, "FENCE_KAFKA_BOOTSTRAP", e)
    };
    let config = kafka_config(&bootstrap);
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("{name}-{run}");
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| unreachable(e.into()))?;
    let options = AdminOptions::new().request_timeout(Some(CONNECT_TIMEOUT));
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &options,
        )
        .await
        .map_err(|e| unreachable(e.into()))?;
    for result in created {
        result.map_err(|(topic, code)| {
            unreachable(format!("creating topic {topic}: {code}").into())
        })?;
    }
    fence_kafka::KafkaFence::builder(config)
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| unreachable(e.into()))
}

fn kafka_config(bootstrap: &str) -> fence_kafka::rdkafka::config::ClientConfig {
    let mut config = fence_kafka::rdkafka::config::ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("socket.connection.setup.timeout.ms", "3000");
    config
}

/// Deletes the topics [`kafka_fence_for_run`] created for `fence` (its data and ledger topics).
pub async fn delete_kafka_topics(fence: &fence_kafka::KafkaFence) -> Result<(), Unreachable> {
    use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions};
    use fence_kafka::rdkafka::client::DefaultClientContext;
    let bootstrap = setting("FENCE_KAFKA_BOOTSTRAP", local::KAFKA_BOOTSTRAP);
    let unreachable = |e: Box<dyn Error + Send + Sync>| {
        Unreachable::new("Kafka", &bootstrap, "FENCE_KAFKA_BOOTSTRAP", e)
    };
    let admin: AdminClient<DefaultClientContext> = kafka_config(&bootstrap)
        .create()
        .map_err(|e| unreachable(e.into()))?;
    let ledger = format!("{}-ledger", fence.data_topic());
    let topics = [fence.data_topic(), ledger.as_str()];
    let options = AdminOptions::new().request_timeout(Some(CONNECT_TIMEOUT));
    for result in admin
        .delete_topics(&topics, &options)
        .await
        .map_err(|e| unreachable(e.into()))?
    {
        result.map_err(|(topic, code)| {
            unreachable(format!("deleting topic {topic}: {code}").into())
        })?;
    }
    Ok(())
}

/// The schema the PostgreSQL examples keep the fence's tables in.
pub const POSTGRES_SCHEMA: &str = "fence_demo";

/// A PostgreSQL fence on `FENCE_POSTGRES_URL` (else the project's PostgreSQL) with its tables
/// in [`POSTGRES_SCHEMA`], created if missing (an example may; an application runs
/// `fence_postgres::migrate` from its migrations).
pub async fn postgres_fence() -> Result<fence_postgres::PostgresFence, Unreachable> {
    let url = setting("FENCE_POSTGRES_URL", local::POSTGRES_URL);
    let unreachable = |e: Box<dyn Error + Send + Sync>| {
        Unreachable::new("PostgreSQL", &url, "FENCE_POSTGRES_URL", e)
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect(&url)
        .await
        .map_err(|e| unreachable(e.into()))?;
    fence_postgres::migrate(&pool, POSTGRES_SCHEMA)
        .await
        .map_err(|e| unreachable(e.into()))?;
    fence_postgres::PostgresFence::new(pool, POSTGRES_SCHEMA).map_err(|e| unreachable(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_shown() {
        assert_eq!(
            without_credentials("redis://user:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(
            without_credentials("redis://127.0.0.1:6390"),
            "redis://127.0.0.1:6390"
        );
        let shown = Unreachable::new(
            "Redis",
            "redis://:pw@127.0.0.1:1",
            "FENCE_REDIS_URL",
            "connection refused",
        )
        .to_string();
        assert!(
            !shown.contains("pw") && shown.contains("FENCE_REDIS_URL"),
            "{shown}"
        );
        assert!(shown.contains("scripts/services up"), "{shown}");
    }
}
