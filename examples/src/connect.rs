//! Connecting the examples to their servers: the environment's settings, else the project's
//! own servers (`scripts/services up` starts them at these addresses), with timeouts of a few
//! seconds and errors that name the address tried and the variable to set.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::env::Env;
use fence_core::{MemoryLeases, Observed};

use crate::{Backend, DemoBackend, Resource};

/// Connects a server backend of the demos.
pub(crate) async fn open(backend: Backend) -> Result<DemoBackend, Box<dyn Error>> {
    Ok(match backend {
        Backend::Redis => {
            let fence = Arc::new(redis_fence().await?);
            DemoBackend {
                description: format!("redis at {}", fence.target()),
                leases: Arc::new(fence.leases()),
                resource: Resource::Store(fence.clone()),
                retirer: Some(fence),
                kafka: None,
            }
        }
        Backend::S3 => {
            let fence = Arc::new(s3_fence().await?);
            DemoBackend {
                description: format!("s3 bucket `{}` (leases in memory)", fence.bucket()),
                resource: Resource::Store(fence.clone()),
                retirer: Some(fence),
                leases: Arc::new(Observed::new(MemoryLeases::new())),
                kafka: None,
            }
        }
        Backend::Kafka => {
            let fence = kafka_fence_for_run("demo").await?;
            DemoBackend {
                description: format!("kafka topic `{}` (leases in memory)", fence.data_topic()),
                resource: Resource::Log(Arc::new(fence.clone())),
                retirer: None,
                leases: Arc::new(Observed::new(MemoryLeases::new())),
                kafka: Some(fence),
            }
        }
        Backend::Postgres => {
            let fence = Arc::new(postgres_fence().await?);
            DemoBackend {
                description: format!("postgres schema `{}`", fence.schema()),
                leases: Arc::new(fence.leases()),
                resource: Resource::Store(fence.clone()),
                retirer: Some(fence),
                kafka: None,
            }
        }
        Backend::Mysql => {
            let fence = Arc::new(mysql_fence().await?);
            DemoBackend {
                description: format!("mysql database `{}`", fence.database()),
                leases: Arc::new(fence.leases()),
                resource: Resource::Store(fence.clone()),
                retirer: Some(fence),
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
    /// The Kafka broker (Apache Kafka from `scripts/services`).
    pub const KAFKA_BOOTSTRAP: &str = "127.0.0.1:19092";
    /// PostgreSQL.
    pub const POSTGRES_URL: &str = "postgres://fence@127.0.0.1:5440/postgres";
    /// MariaDB (the test user of the project's server, not a secret).
    pub const MYSQL_URL: &str = "mysql://fence:fence@127.0.0.1:3340/fence";
    /// Azurite's blob service, its development account's URL.
    pub const AZURITE_ACCOUNT_URL: &str = "http://127.0.0.1:10100/devstoreaccount1";
    /// The variable that moves it (`scripts/services env` prints it; `FENCE_AZURITE_PORT`
    /// moves the server).
    pub const AZURITE_URL_VARIABLE: &str = "FENCE_AZURITE_URL";
    /// Azurite's development account.
    pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
    /// Azurite's published development key (every Azurite has it; not a secret).
    pub const AZURITE_ACCOUNT_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    /// The examples' container on it.
    pub const AZURITE_CONTAINER: &str = "fence-examples";
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
    /// `what` (a server's kind) could not be used at `address` (credentials in it are not
    /// shown) for `source`; `variable` names where the example takes the address from.
    pub fn new(
        what: &'static str,
        address: &str,
        variable: &'static str,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        Unreachable {
            what,
            address: fence_core::env::redact_url(address),
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

/// The process environment, with the project's server as the default target when the user
/// names none of `targets` (a default layered under a user's choice of another target would
/// make two targets, which the adapters refuse).
fn env_or_local(targets: &[&str], local: &[(&str, &str)]) -> Env {
    let chosen = targets
        .iter()
        .any(|name| Env::process().get(name).is_some());
    if chosen {
        Env::process()
    } else {
        Env::process().or_else(Env::from_pairs(local.iter().copied()))
    }
}

/// A Redis fence from the `FENCE_REDIS_*` variables (`fence_redis::env`: a URL, a cluster or
/// sentinels), else the project's Redis.
pub async fn redis_fence() -> Result<Observed<fence_redis::RedisFence>, Unreachable> {
    use fence_redis::env::{CLUSTER, SENTINELS, URL};
    let env = env_or_local(&[URL, CLUSTER, SENTINELS], &[(URL, local::REDIS_URL)]);
    let (variable, address) = [URL, CLUSTER, SENTINELS]
        .into_iter()
        .find_map(|name| env.get(name).map(|value| (name, value)))
        .unwrap_or((URL, String::new()));
    fence_redis::RedisFenceBuilder::from_env_with(&env)
        .map(|builder| builder.connection_timeout(CONNECT_TIMEOUT))
        .map_err(|e| Unreachable::new("Redis", &address, variable, e))?
        .connect()
        .await
        .map_err(|e| Unreachable::new("Redis", &address, variable, e))
}

/// An S3 fence from the `FENCE_S3_*` variables (`fence_s3::env`: an endpoint, a bucket, static
/// keys or else the default AWS chain — an IAM role works), else the project's SeaweedFS and
/// its test keys; connected (the capability probe ran).
pub async fn s3_fence() -> Result<Observed<fence_s3::S3Fence>, Unreachable> {
    use fence_s3::env::{ACCESS_KEY, BUCKET, ENDPOINT, SECRET_KEY};
    // The project's server only when the user names no endpoint: its test keys then, never the
    // user's AWS credentials.
    let env = if Env::process().get(ENDPOINT).is_some() || Env::process().get(BUCKET).is_some() {
        Env::process()
    } else {
        Env::from_pairs([
            (ENDPOINT, local::S3_ENDPOINT),
            (BUCKET, local::S3_BUCKET),
            (ACCESS_KEY, local::S3_ACCESS_KEY),
            (SECRET_KEY, local::S3_SECRET_KEY),
        ])
    };
    let address = format!(
        "{} (bucket {})",
        env.get(ENDPOINT).unwrap_or_else(|| "AWS S3".into()),
        env.get(BUCKET).unwrap_or_default()
    );
    let unreachable = |e: fence_core::FenceError| Unreachable::new("S3", &address, ENDPOINT, e);
    fence_s3::S3FenceBuilder::from_env_with(&env)
        .await
        .map_err(unreachable)?
        .connect()
        .await
        .map_err(unreachable)
}

/// A Kafka fence on fresh topics (`<name>-<time>` and its ledger) of `FENCE_KAFKA_BOOTSTRAP`,
/// else the project's broker. [`delete_kafka_topics`] removes them.
pub async fn kafka_fence_for_run(
    name: &str,
) -> Result<Observed<fence_kafka::KafkaFence>, Unreachable> {
    let (config, bootstrap) = kafka_config()?;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("{name}-{run}");
    // The fence creates its ledger topic itself, with the settings a ledger needs.
    create_kafka_topics(&config, &[&topic]).await?;
    fence_kafka::KafkaFence::builder(config)
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| Unreachable::new("Kafka", &bootstrap, fence_kafka::env::BOOTSTRAP, e))
}

/// Creates `topics` (one partition, one replica) on the cluster `config` names: an example's
/// own data topics (a fence creates its ledger topic itself).
pub async fn create_kafka_topics(
    config: &fence_kafka::rdkafka::config::ClientConfig,
    topics: &[&str],
) -> Result<(), Unreachable> {
    use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use fence_kafka::rdkafka::client::DefaultClientContext;
    let bootstrap = config.get("bootstrap.servers").unwrap_or_default();
    let unreachable = |e: Box<dyn Error + Send + Sync>| {
        Unreachable::new("Kafka", bootstrap, fence_kafka::env::BOOTSTRAP, e)
    };
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| unreachable(e.into()))?;
    let options = AdminOptions::new().request_timeout(Some(CONNECT_TIMEOUT));
    let new: Vec<_> = topics
        .iter()
        .map(|topic| NewTopic::new(topic, 1, TopicReplication::Fixed(1)))
        .collect();
    for result in admin
        .create_topics(&new, &options)
        .await
        .map_err(|e| unreachable(e.into()))?
    {
        result.map_err(|(topic, code)| {
            unreachable(format!("creating topic {topic}: {code}").into())
        })?;
    }
    Ok(())
}

/// The client configuration from the `FENCE_KAFKA_*` variables (`fence_kafka::env`), else the
/// project's broker, connecting within a few seconds; and the bootstrap servers, for errors.
fn kafka_config() -> Result<(fence_kafka::rdkafka::config::ClientConfig, String), Unreachable> {
    use fence_kafka::env::{BOOTSTRAP, PROPERTIES, PROPERTIES_FILE};
    let env = env_or_local(
        &[BOOTSTRAP, PROPERTIES, PROPERTIES_FILE],
        &[(BOOTSTRAP, local::KAFKA_BOOTSTRAP)],
    );
    let bootstrap = env.get(BOOTSTRAP).unwrap_or_default();
    let mut config = fence_kafka::env::client_config(&env)
        .map_err(|e| Unreachable::new("Kafka", &bootstrap, BOOTSTRAP, e))?;
    if config.get("socket.connection.setup.timeout.ms").is_none() {
        config.set("socket.connection.setup.timeout.ms", "3000");
    }
    let bootstrap = config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_owned();
    Ok((config, bootstrap))
}

/// Deletes the topics [`kafka_fence_for_run`] created for `fence` (its data and ledger topics).
pub async fn delete_kafka_topics(
    fence: &Observed<fence_kafka::KafkaFence>,
) -> Result<(), Unreachable> {
    use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions};
    use fence_kafka::rdkafka::client::DefaultClientContext;
    let (config, bootstrap) = kafka_config()?;
    let unreachable = |e: Box<dyn Error + Send + Sync>| {
        Unreachable::new("Kafka", &bootstrap, fence_kafka::env::BOOTSTRAP, e)
    };
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| unreachable(e.into()))?;
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

/// The database the MySQL examples keep the fence's tables in.
pub const MYSQL_DATABASE: &str = "fence_demo";

/// A MySQL fence on `FENCE_MYSQL_URL` (else the project's MariaDB) with its tables in
/// [`MYSQL_DATABASE`], created if missing (an example may; an application runs
/// `fence_mysql::migrate` from its migrations).
pub async fn mysql_fence() -> Result<Observed<fence_mysql::MySqlFence>, Unreachable> {
    use fence_mysql::env::{ACQUIRE_TIMEOUT_MS, DATABASE, MAX_CONNECTIONS, URL};
    let timeout = CONNECT_TIMEOUT.as_millis().to_string();
    let env = Env::from_pairs([(DATABASE, MYSQL_DATABASE)])
        .or_else(env_or_local(&[URL], &[(URL, local::MYSQL_URL)]))
        .or_else(Env::from_pairs([
            (MAX_CONNECTIONS, "8"),
            (ACQUIRE_TIMEOUT_MS, timeout.as_str()),
        ]));
    let url = env.get(URL).unwrap_or_default();
    let unreachable = |e: Box<dyn Error + Send + Sync>| Unreachable::new("MySQL", &url, URL, e);
    let fence = fence_mysql::MySqlFenceBuilder::from_env_with(&env)
        .await
        .and_then(fence_mysql::MySqlFenceBuilder::build)
        .map_err(|e| unreachable(e.into()))?;
    fence_mysql::migrate(fence.pool(), fence.database())
        .await
        .map_err(|e| unreachable(e.into()))?;
    Ok(fence)
}

/// The schema the PostgreSQL examples keep the fence's tables in.
pub const POSTGRES_SCHEMA: &str = "fence_demo";

/// A PostgreSQL fence on `FENCE_POSTGRES_URL` (else the project's PostgreSQL) with its tables
/// in [`POSTGRES_SCHEMA`], created if missing (an example may; an application runs
/// `fence_postgres::migrate` from its migrations).
pub async fn postgres_fence() -> Result<Observed<fence_postgres::PostgresFence>, Unreachable> {
    use fence_postgres::env::{ACQUIRE_TIMEOUT_MS, MAX_CONNECTIONS, SCHEMA, URL};
    let timeout = CONNECT_TIMEOUT.as_millis().to_string();
    // The examples' own tables live beside the fence's, in their schema.
    let env = Env::from_pairs([(SCHEMA, POSTGRES_SCHEMA)])
        .or_else(env_or_local(&[URL], &[(URL, local::POSTGRES_URL)]))
        .or_else(Env::from_pairs([
            (MAX_CONNECTIONS, "8"),
            (ACQUIRE_TIMEOUT_MS, timeout.as_str()),
        ]));
    let url = env.get(URL).unwrap_or_default();
    let unreachable =
        |e: Box<dyn Error + Send + Sync>| Unreachable::new("PostgreSQL", &url, URL, e);
    let fence = fence_postgres::PostgresFenceBuilder::from_env_with(&env)
        .await
        .and_then(fence_postgres::PostgresFenceBuilder::build)
        .map_err(|e| unreachable(e.into()))?;
    // An example may create its tables; an application runs `fence_postgres::migrate` from
    // its migrations.
    fence_postgres::migrate(fence.pool(), fence.schema())
        .await
        .map_err(|e| unreachable(e.into()))?;
    Ok(fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_shown() {
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
