//! Where the fenced state lives: one flag per setting, each also read from the environment
//! variable the library builders and examples use (named by the adapter's own `env` module:
//! every variable name is defined once).

use std::fmt;

use clap::{Args, ValueEnum};
use fence_core::env::Env;
use fence_core::Observed;
use fence_dynamodb::DynamoDb;
use fence_etcd::Etcd;
use fence_mysql::MySqlFence;
use fence_object_store::{ObjectStoreFence, ObjectStoreFenceBuilder};
use fence_postgres::PostgresFence;
use fence_redis::{RedisFence, RedisFenceBuilder};
use fence_s3::{S3Fence, S3FenceBuilder};

use crate::report::Report;
use crate::Backend;

/// How object keys are laid out ([`fence_s3::KeyLayout`], the same for fence-object-store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Layout {
    /// One escaped segment per domain (the default).
    Escaped,
    /// The domain as written, `/` included.
    Verbatim,
}

impl Layout {
    /// The name the libraries' variables use.
    fn name(self) -> &'static str {
        let layout = match self {
            Layout::Escaped => fence_s3::KeyLayout::Escaped,
            Layout::Verbatim => fence_s3::KeyLayout::Verbatim,
        };
        layout.name()
    }
}

/// The default bound on how far above a domain's mark an operator's claim or adopt may go:
/// a mistyped token (`18446744073709551615`) would otherwise fence every future owner out.
pub(crate) const DEFAULT_MAX_TOKEN_STEP: u64 = 1_000_000;

/// The connection settings of every backend.
#[derive(Args, Clone)]
pub(crate) struct Targets {
    /// Refuse claims and adopts whose token is more than this above the domain's mark (above
    /// zero for a domain without one), at the resource where it can check (Redis, PostgreSQL,
    /// MySQL, etcd, DynamoDB; S3 and Kafka between the read and the write); 0 for no bound.
    #[arg(long, env = fence_core::env::MAX_TOKEN_STEP, global = true, default_value_t = DEFAULT_MAX_TOKEN_STEP)]
    max_token_step: u64,
    /// Redis, PostgreSQL, MySQL, etcd, DynamoDB: refuse tokens the resource's own issuer never
    /// issued.
    #[arg(long, env = fence_core::env::ISSUED_ONLY, global = true)]
    issued_only: bool,
    /// Redis URL (standalone; Redis Cluster: `--redis-cluster`; behind Sentinel: the
    /// `FENCE_REDIS_SENTINELS` and `FENCE_REDIS_SENTINEL_SERVICE` variables).
    #[arg(long, env = fence_redis::env::URL, global = true, hide_env_values = true)]
    redis_url: Option<String>,
    /// Redis Cluster nodes, comma-separated.
    #[arg(
        long,
        env = fence_redis::env::CLUSTER,
        global = true,
        value_delimiter = ',',
        hide_env_values = true
    )]
    redis_cluster: Vec<String>,
    /// Key prefix of the fence on Redis.
    #[arg(long, env = fence_redis::env::PREFIX, global = true, default_value = fence_redis::DEFAULT_PREFIX)]
    redis_prefix: String,
    /// S3 endpoint of an S3-compatible server (path-style); unset for AWS.
    #[arg(long, env = fence_s3::env::ENDPOINT, global = true)]
    s3_endpoint: Option<String>,
    /// S3 bucket.
    #[arg(long, env = fence_s3::env::BUCKET, global = true)]
    s3_bucket: Option<String>,
    /// S3 region (else the AWS chain's; `us-east-1` with an endpoint).
    #[arg(long, env = fence_s3::env::REGION, global = true)]
    s3_region: Option<String>,
    /// S3 access key id.
    #[arg(
        long,
        env = fence_s3::env::ACCESS_KEY,
        global = true,
        hide_env_values = true
    )]
    s3_access_key: Option<String>,
    /// S3 secret access key.
    #[arg(
        long,
        env = fence_s3::env::SECRET_KEY,
        global = true,
        hide_env_values = true
    )]
    s3_secret_key: Option<String>,
    /// Key prefix of the fence's objects (empty or ending in `/`).
    #[arg(long, env = fence_s3::env::PREFIX, global = true, default_value = fence_s3::DEFAULT_PREFIX)]
    s3_prefix: String,
    /// How domains map to object keys.
    #[arg(
        long,
        env = fence_s3::env::KEY_LAYOUT,
        global = true,
        value_enum,
        default_value = "escaped"
    )]
    s3_key_layout: Layout,
    /// The object store as object_store spells it (`az://container`, `gs://bucket`,
    /// `s3://bucket`); credentials and endpoint from object_store's own variables.
    #[arg(
        long,
        env = fence_object_store::env::URL,
        global = true,
        hide_env_values = true
    )]
    object_store_url: Option<String>,
    /// Key prefix of the fence's objects in the object store (empty or ending in `/`).
    #[arg(long, env = fence_object_store::env::PREFIX, global = true, default_value = fence_object_store::DEFAULT_PREFIX)]
    object_store_prefix: String,
    /// How domains map to object keys in the object store.
    #[arg(
        long,
        env = fence_object_store::env::KEY_LAYOUT,
        global = true,
        value_enum,
        default_value = "escaped"
    )]
    object_store_key_layout: Layout,
    /// PostgreSQL URL.
    #[arg(
        long,
        env = fence_postgres::env::URL,
        global = true,
        hide_env_values = true
    )]
    postgres_url: Option<String>,
    /// Schema of the fence's tables.
    #[arg(
        long,
        env = fence_postgres::env::SCHEMA,
        global = true,
        default_value = fence_postgres::env::DEFAULT_SCHEMA
    )]
    postgres_schema: String,
    /// MySQL or MariaDB URL.
    #[arg(long, env = fence_mysql::env::URL, global = true, hide_env_values = true)]
    mysql_url: Option<String>,
    /// Database of the fence's tables on MySQL.
    #[arg(
        long,
        env = fence_mysql::env::DATABASE,
        global = true,
        default_value = fence_mysql::env::DEFAULT_DATABASE
    )]
    mysql_database: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = fence_kafka::env::BOOTSTRAP, global = true)]
    kafka_bootstrap: Option<String>,
    /// Extra Kafka client properties, `key=value;key=value` (security settings).
    #[arg(
        long,
        env = fence_kafka::env::PROPERTIES,
        global = true,
        hide_env_values = true
    )]
    kafka_properties: Option<String>,
    /// The fenced data topic.
    #[arg(long, env = fence_kafka::env::TOPIC, global = true)]
    kafka_topic: Option<String>,
    /// The fence-ledger topic.
    #[arg(long, env = fence_kafka::env::LEDGER_TOPIC, global = true, default_value = fence_kafka::DEFAULT_LEDGER_TOPIC)]
    kafka_ledger_topic: String,
    /// The transactional id prefix of the domains' producers.
    #[arg(long, env = fence_kafka::env::TRANSACTIONAL_ID_PREFIX, global = true, default_value = fence_kafka::DEFAULT_TRANSACTIONAL_ID_PREFIX)]
    kafka_transactional_id_prefix: String,
    /// etcd endpoints, comma-separated.
    #[arg(
        long,
        env = fence_etcd::env::ENDPOINTS,
        global = true,
        value_delimiter = ','
    )]
    etcd_endpoints: Vec<String>,
    /// etcd user, for a cluster with authentication (with `--etcd-password`).
    #[arg(long, env = fence_etcd::env::USER, global = true)]
    etcd_user: Option<String>,
    /// etcd password of `--etcd-user`.
    #[arg(
        long,
        env = fence_etcd::env::PASSWORD,
        global = true,
        hide_env_values = true
    )]
    etcd_password: Option<String>,
    /// Key prefix of the fence on etcd (no default: the library has none, and a wrong one
    /// would show every domain as unseen).
    #[arg(long, env = fence_etcd::env::PREFIX, global = true)]
    etcd_prefix: Option<String>,
    /// DynamoDB table of Fence's items.
    #[arg(long, env = fence_dynamodb::env::TABLE, global = true)]
    dynamodb_table: Option<String>,
    /// Namespace of Fence's items in the DynamoDB table (no default: the library has none,
    /// and a wrong one would show every domain as unseen).
    #[arg(long, env = fence_dynamodb::env::NAMESPACE, global = true)]
    dynamodb_namespace: Option<String>,
    /// DynamoDB endpoint other than AWS's (an emulator); unset for AWS.
    #[arg(long, env = fence_dynamodb::env::ENDPOINT, global = true)]
    dynamodb_endpoint: Option<String>,
    /// DynamoDB region (else the AWS chain's; `us-east-1` with an endpoint).
    #[arg(long, env = fence_dynamodb::env::REGION, global = true)]
    dynamodb_region: Option<String>,
    /// DynamoDB access key id.
    #[arg(
        long,
        env = fence_dynamodb::env::ACCESS_KEY,
        global = true,
        hide_env_values = true
    )]
    dynamodb_access_key: Option<String>,
    /// DynamoDB secret access key.
    #[arg(
        long,
        env = fence_dynamodb::env::SECRET_KEY,
        global = true,
        hide_env_values = true
    )]
    dynamodb_secret_key: Option<String>,
    /// DynamoDB table of the outbox (fence-outbox-dynamodb), for `fence outbox … dynamodb`.
    #[arg(long, env = fence_outbox_dynamodb::TABLE_VARIABLE, global = true)]
    dynamodb_outbox_table: Option<String>,
}

impl fmt::Debug for Targets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs and keys may hold credentials: only which targets are set is shown.
        f.debug_struct("Targets")
            .field(
                "redis",
                &(self.redis_url.is_some() || !self.redis_cluster.is_empty()),
            )
            .field("s3_bucket", &self.s3_bucket)
            .field("object_store", &self.object_store_url.is_some())
            .field("postgres", &self.postgres_url.is_some())
            .field("mysql", &self.mysql_url.is_some())
            .field("etcd_endpoints", &self.etcd_endpoints)
            .field("kafka_topic", &self.kafka_topic)
            .field("dynamodb_table", &self.dynamodb_table)
            .finish_non_exhaustive()
    }
}

/// A connection failure or a missing setting, as a report.
type Connect<T> = Result<T, Report>;

/// A setting's value; an empty variable counts as unset (`FENCE_REDIS_CLUSTER= fence ...`).
fn set(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

impl Targets {
    /// The same settings confined to names of one `qualify` run: its own Redis prefix, S3
    /// prefix, PostgreSQL schema, etcd prefix, DynamoDB namespace and Kafka topics, each under
    /// the configured one.
    pub(crate) fn confined(&self, run: &str) -> Targets {
        let mut scoped = self.clone();
        scoped.redis_prefix = format!("{}:qualify-{run}", self.redis_prefix);
        scoped.s3_prefix = format!("{}qualify-{run}/", self.s3_prefix);
        scoped.object_store_prefix = format!("{}qualify-{run}/", self.object_store_prefix);
        scoped.postgres_schema = format!("{}_qualify_{run}", self.postgres_schema);
        scoped.mysql_database = format!("{}_qualify_{run}", self.mysql_database);
        scoped.etcd_prefix = Some(format!(
            "{}/qualify-{run}",
            set(&self.etcd_prefix).unwrap_or("fence")
        ));
        scoped.dynamodb_namespace = Some(format!(
            "{}.qualify-{run}",
            set(&self.dynamodb_namespace).unwrap_or("fence")
        ));
        let topic = format!(
            "{}-qualify-{run}",
            set(&self.kafka_topic).unwrap_or("fence")
        );
        scoped.kafka_ledger_topic = format!("{topic}-ledger");
        scoped.kafka_topic = Some(topic);
        scoped.kafka_transactional_id_prefix =
            format!("{}qualify-{run}-", self.kafka_transactional_id_prefix);
        scoped
    }

    /// The one `host:port` a backend's clients connect to (for the fault proxy).
    pub(crate) fn endpoint_address(&self, backend: Backend) -> Connect<std::net::SocketAddr> {
        let url = self.proxied_url(backend)?;
        let authority = authority(url).ok_or_else(|| {
            Report::usage(format!(
                "--network-faults needs an explicit host:port in the endpoint ({})",
                scheme_of(url)
            ))
        })?;
        std::net::ToSocketAddrs::to_socket_addrs(authority)
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| Report::usage(format!("cannot resolve {authority}")))
    }

    /// Points the backend's endpoint at `proxy` instead.
    pub(crate) fn route_through(
        &mut self,
        backend: Backend,
        proxy: std::net::SocketAddr,
    ) -> Connect<()> {
        let url = self.proxied_url(backend)?;
        let Some(routed) = with_authority(url, &proxy.to_string()) else {
            return Err(Report::usage(
                "--network-faults needs an explicit host:port",
            ));
        };
        match backend {
            Backend::Redis => self.redis_url = Some(routed),
            Backend::S3 => self.s3_endpoint = Some(routed),
            Backend::Postgres => self.postgres_url = Some(routed),
            Backend::Mysql => self.mysql_url = Some(routed),
            Backend::Etcd => self.etcd_endpoints = vec![routed],
            Backend::Dynamodb => self.dynamodb_endpoint = Some(routed),
            Backend::Kafka | Backend::ObjectStore => {}
        }
        Ok(())
    }

    /// The endpoint the fault proxy can sit in front of: one plain-TCP address.
    fn proxied_url(&self, backend: Backend) -> Connect<&str> {
        let refused = |why: &str| Err(Report::usage(format!("--network-faults: {why}")));
        let url = match backend {
            Backend::Redis if self.redis_cluster.iter().any(|n| !n.is_empty()) => {
                return refused("a Redis Cluster tells clients its nodes' own addresses; qualify it without network faults");
            }
            Backend::Redis => set(&self.redis_url),
            Backend::S3 => set(&self.s3_endpoint),
            Backend::Postgres => set(&self.postgres_url),
            Backend::Mysql => set(&self.mysql_url),
            Backend::Etcd if self.etcd_endpoints.len() == 1 => {
                Some(self.etcd_endpoints[0].as_str())
            }
            Backend::Etcd => return refused("name exactly one etcd endpoint"),
            Backend::Dynamodb => set(&self.dynamodb_endpoint),
            Backend::Kafka => {
                return refused("Kafka brokers tell clients their own addresses; qualify Kafka without network faults (the run still pauses workers past their leases)");
            }
            Backend::ObjectStore => {
                return refused("an object store's endpoint is object_store's own setting; qualify it without network faults (the run still pauses workers past their leases)");
            }
        };
        let Some(url) = url else {
            return refused("the endpoint is not configured");
        };
        if matches!(scheme_of(url), "https" | "rediss")
            || url.contains("sslmode=require")
            || url.contains("sslmode=verify")
        {
            return refused(
                "TLS endpoints cannot go through the proxy (the certificate names the real host)",
            );
        }
        Ok(url)
    }

    /// True when Redis is configured through Sentinel (`FENCE_REDIS_SENTINELS`).
    pub(crate) fn redis_behind_sentinel(&self) -> bool {
        self.env().get(fence_redis::env::SENTINELS).is_some()
    }

    /// The Redis nodes to clean up: the URL, or every cluster node; and whether it is a cluster.
    pub(crate) fn redis_nodes(&self) -> (Vec<String>, bool) {
        match set(&self.redis_url) {
            Some(url) => (vec![url.to_owned()], false),
            None => (
                self.redis_cluster
                    .iter()
                    .filter(|n| !n.is_empty())
                    .cloned()
                    .collect(),
                true,
            ),
        }
    }

    /// The Redis key prefix.
    pub(crate) fn redis_key_prefix(&self) -> &str {
        &self.redis_prefix
    }

    /// The S3 object prefix.
    pub(crate) fn s3_object_prefix(&self) -> &str {
        &self.s3_prefix
    }

    /// The Kafka client configuration and the data and ledger topics.
    pub(crate) fn kafka_topics(
        &self,
    ) -> Connect<(fence_kafka::rdkafka::ClientConfig, Vec<String>)> {
        let env = self.env();
        let config = fence_kafka::env::client_config(&env).map_err(|e| Report::failed(&e))?;
        let topic = env
            .require(fence_kafka::env::TOPIC)
            .map_err(|e| Report::failed(&e))?;
        Ok((config, vec![topic, self.kafka_ledger_topic.clone()]))
    }

    /// The settings as the libraries' variables (the command reads each one it has a flag for,
    /// and a flag overrides it), over the process environment for the variables the command has
    /// no flag for (Sentinel, Kafka properties files, replica waits, …): the adapters' own
    /// `from_env` then reads them, so the command and the libraries agree on every rule.
    fn env(&self) -> Env {
        let mut flags: Vec<(&'static str, String)> = Vec::new();
        let mut put = |name: &'static str, value: Option<&str>| {
            if let Some(value) = value {
                flags.push((name, value.to_owned()));
            }
        };
        put(
            fence_core::env::MAX_TOKEN_STEP,
            Some(&self.max_token_step.to_string()),
        );
        put(
            fence_core::env::ISSUED_ONLY,
            Some(if self.issued_only { "1" } else { "0" }),
        );
        put(fence_redis::env::URL, set(&self.redis_url));
        let cluster = self
            .redis_cluster
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join(",");
        put(fence_redis::env::CLUSTER, Some(&cluster));
        put(fence_redis::env::PREFIX, Some(&self.redis_prefix));
        put(fence_s3::env::ENDPOINT, set(&self.s3_endpoint));
        put(fence_s3::env::BUCKET, set(&self.s3_bucket));
        put(fence_s3::env::REGION, set(&self.s3_region));
        put(fence_s3::env::ACCESS_KEY, set(&self.s3_access_key));
        put(fence_s3::env::SECRET_KEY, set(&self.s3_secret_key));
        put(fence_s3::env::PREFIX, Some(&self.s3_prefix));
        put(fence_s3::env::KEY_LAYOUT, Some(self.s3_key_layout.name()));
        put(fence_object_store::env::URL, set(&self.object_store_url));
        put(
            fence_object_store::env::PREFIX,
            Some(&self.object_store_prefix),
        );
        put(
            fence_object_store::env::KEY_LAYOUT,
            Some(self.object_store_key_layout.name()),
        );
        put(fence_postgres::env::URL, set(&self.postgres_url));
        put(fence_postgres::env::SCHEMA, Some(&self.postgres_schema));
        put(fence_mysql::env::URL, set(&self.mysql_url));
        put(fence_mysql::env::DATABASE, Some(&self.mysql_database));
        put(fence_kafka::env::BOOTSTRAP, set(&self.kafka_bootstrap));
        put(fence_kafka::env::PROPERTIES, set(&self.kafka_properties));
        put(fence_kafka::env::TOPIC, set(&self.kafka_topic));
        put(
            fence_kafka::env::LEDGER_TOPIC,
            Some(&self.kafka_ledger_topic),
        );
        put(
            fence_kafka::env::TRANSACTIONAL_ID_PREFIX,
            Some(&self.kafka_transactional_id_prefix),
        );
        put(
            fence_etcd::env::ENDPOINTS,
            Some(&self.etcd_endpoints.join(",")),
        );
        put(fence_etcd::env::PREFIX, set(&self.etcd_prefix));
        put(fence_etcd::env::USER, set(&self.etcd_user));
        put(fence_etcd::env::PASSWORD, set(&self.etcd_password));
        put(fence_dynamodb::env::TABLE, set(&self.dynamodb_table));
        put(
            fence_dynamodb::env::NAMESPACE,
            set(&self.dynamodb_namespace),
        );
        put(fence_dynamodb::env::ENDPOINT, set(&self.dynamodb_endpoint));
        put(fence_dynamodb::env::REGION, set(&self.dynamodb_region));
        put(
            fence_dynamodb::env::ACCESS_KEY,
            set(&self.dynamodb_access_key),
        );
        put(
            fence_dynamodb::env::SECRET_KEY,
            set(&self.dynamodb_secret_key),
        );
        // An operator's command needs few connections, unless the environment says otherwise.
        let defaults = Env::from_pairs([
            (fence_postgres::env::MAX_CONNECTIONS, "2"),
            (fence_mysql::env::MAX_CONNECTIONS, "2"),
        ]);
        Env::from_pairs(flags)
            .or_else(Env::process())
            .or_else(defaults)
    }

    /// A connected Redis fence (a URL, a cluster or sentinels: one of them).
    pub(crate) async fn redis(&self) -> Connect<Observed<RedisFence>> {
        RedisFenceBuilder::from_env_with(&self.env())
            .map_err(|e| Report::failed(&e))?
            .connect()
            .await
            .map_err(|e| Report::failed(&e))
    }

    /// A plain S3 client with the configured endpoint, region and credentials (static ones,
    /// else the default AWS chain).
    pub(crate) async fn s3_client(&self) -> Connect<fence_s3::aws_sdk_s3::Client> {
        fence_s3::env::client_config(&self.env())
            .await
            .map(fence_s3::aws_sdk_s3::Client::from_conf)
            .map_err(|e| Report::failed(&e))
    }

    /// The configured bucket.
    pub(crate) fn s3_bucket(&self) -> Connect<String> {
        self.env()
            .require(fence_s3::env::BUCKET)
            .map_err(|e| Report::failed(&e))
    }

    /// An S3 fence (no request made yet).
    pub(crate) async fn s3(&self) -> Connect<Observed<S3Fence>> {
        S3FenceBuilder::from_env_with(&self.env())
            .await
            .and_then(S3FenceBuilder::build)
            .map_err(|e| Report::failed(&e))
    }

    /// A fence over the object store the URL names (no request made yet). `memory:///` is
    /// refused: each command would get an empty store of its own.
    pub(crate) fn object_store(&self) -> Connect<Observed<ObjectStoreFence>> {
        let env = self.env();
        if env
            .get(fence_object_store::env::URL)
            .is_some_and(|url| url.trim_start().starts_with("memory:"))
        {
            return Err(Report::usage(format!(
                "{}=memory:/// names a store inside one process: the command would see an empty one",
                fence_object_store::env::URL
            )));
        }
        ObjectStoreFenceBuilder::from_env_with(&env)
            .and_then(ObjectStoreFenceBuilder::build)
            .map_err(|e| Report::failed(&e))
    }

    /// A PostgreSQL fence on a small pool.
    pub(crate) async fn postgres(&self) -> Connect<Observed<PostgresFence>> {
        fence_postgres::PostgresFenceBuilder::from_env_with(&self.env())
            .await
            .and_then(fence_postgres::PostgresFenceBuilder::build)
            .map_err(|e| Report::failed(&e))
    }

    /// A MySQL fence on a small pool.
    pub(crate) async fn mysql(&self) -> Connect<Observed<MySqlFence>> {
        fence_mysql::MySqlFenceBuilder::from_env_with(&self.env())
            .await
            .and_then(fence_mysql::MySqlFenceBuilder::build)
            .map_err(|e| Report::failed(&e))
    }

    /// A Kafka fence on the configured topics (no topic is created).
    pub(crate) fn kafka(&self) -> Connect<Observed<fence_kafka::KafkaFence>> {
        fence_kafka::KafkaFenceBuilder::from_env_with(&self.env())
            .map(|builder| builder.timeout(std::time::Duration::from_secs(10)))
            .and_then(fence_kafka::KafkaFenceBuilder::build)
            .map_err(|e| Report::failed(&e))
    }

    /// An etcd handle; its fences carry the configured bounds.
    pub(crate) async fn etcd(&self) -> Connect<Etcd> {
        Etcd::from_env_with(&self.env())
            .await
            .map_err(|e| Report::failed(&e))
    }

    /// The DynamoDB outbox's table.
    pub(crate) fn dynamodb_outbox_table(&self) -> Connect<String> {
        set(&self.dynamodb_outbox_table)
            .map(str::to_owned)
            .ok_or_else(|| {
                Report::usage(format!(
                    "no DynamoDB outbox table: set {} (or --dynamodb-outbox-table)",
                    fence_outbox_dynamodb::TABLE_VARIABLE
                ))
            })
    }

    /// A DynamoDB handle (no request made yet); its fences carry the configured bounds.
    pub(crate) async fn dynamodb(&self) -> Connect<DynamoDb> {
        DynamoDb::from_env_with(&self.env())
            .await
            .map_err(|e| Report::failed(&e))
    }
}

/// A URL's scheme (`redis`, `http`...), or the whole text when it has none.
fn scheme_of(url: &str) -> &str {
    url.split_once("://").map_or(url, |(scheme, _)| scheme)
}

/// Where a URL's `host:port` is (after any `user:password@`), when the port is explicit.
fn authority_range(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let start = url[start..end].rfind('@').map_or(start, |i| start + i + 1);
    let (_, port) = url[start..end].rsplit_once(':')?;
    port.parse::<u16>().ok().map(|_| start..end)
}

/// The `host:port` of a URL, when the port is explicit.
fn authority(url: &str) -> Option<&str> {
    authority_range(url).map(|range| &url[range])
}

/// The URL with its `host:port` replaced by `address` (scheme, credentials and path kept).
pub(crate) fn with_authority(url: &str, address: &str) -> Option<String> {
    let range = authority_range(url)?;
    Some(format!(
        "{}{address}{}",
        &url[..range.start],
        &url[range.end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_replaced_where_it_is_not_where_its_text_recurs() {
        let url = "redis://127.0.0.1:6390:pw@127.0.0.1:6390/0";
        assert_eq!(authority(url), Some("127.0.0.1:6390"));
        assert_eq!(
            with_authority(url, "127.0.0.1:1").as_deref(),
            Some("redis://127.0.0.1:6390:pw@127.0.0.1:1/0")
        );
        assert_eq!(
            with_authority("postgres://u@[::1]:5440/db?sslmode=disable", "127.0.0.1:2").as_deref(),
            Some("postgres://u@127.0.0.1:2/db?sslmode=disable")
        );
        assert_eq!(
            authority("http://example.com/bucket"),
            None,
            "no explicit port"
        );
        assert_eq!(authority("http://h:notaport"), None);
    }
}
