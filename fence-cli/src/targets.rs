//! Where the fenced state lives: one flag per setting, each also read from the environment
//! variable the library builders and examples use.

use std::fmt;
use std::num::NonZeroU64;

use clap::{Args, ValueEnum};
use fence_etcd::Etcd;
use fence_postgres::PostgresFence;
use fence_redis::RedisFence;
use fence_s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use fence_s3::S3Fence;

use crate::report::Report;
use crate::Backend;

/// How S3 keys are laid out ([`fence_s3::KeyLayout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum S3Layout {
    /// One escaped segment per domain (the default).
    Escaped,
    /// The domain as written, `/` included.
    Verbatim,
}

/// The default bound on how far above a domain's mark an operator's claim or adopt may go:
/// a mistyped token (`18446744073709551615`) would otherwise fence every future owner out.
pub(crate) const DEFAULT_MAX_TOKEN_STEP: u64 = 1_000_000;

/// The connection settings of every backend.
#[derive(Args, Clone)]
pub(crate) struct Targets {
    /// Refuse claims and adopts whose token is more than this above the domain's mark (above
    /// zero for a domain without one), at the resource where it can check (Redis, PostgreSQL,
    /// etcd; S3 and Kafka between the read and the write); 0 for no bound.
    #[arg(long, env = "FENCE_MAX_TOKEN_STEP", global = true, default_value_t = DEFAULT_MAX_TOKEN_STEP)]
    max_token_step: u64,
    /// Redis, PostgreSQL, etcd: refuse tokens the resource's own issuer never issued.
    #[arg(long, env = "FENCE_ISSUED_ONLY", global = true)]
    issued_only: bool,
    /// Redis URL.
    #[arg(long, env = "FENCE_REDIS_URL", global = true, hide_env_values = true)]
    redis_url: Option<String>,
    /// Redis Cluster nodes, comma-separated.
    #[arg(
        long,
        env = "FENCE_REDIS_CLUSTER",
        global = true,
        value_delimiter = ',',
        hide_env_values = true
    )]
    redis_cluster: Vec<String>,
    /// Key prefix of the fence on Redis.
    #[arg(long, env = "FENCE_REDIS_PREFIX", global = true, default_value = fence_redis::DEFAULT_PREFIX)]
    redis_prefix: String,
    /// S3 endpoint of an S3-compatible server (path-style); unset for AWS.
    #[arg(long, env = "FENCE_S3_ENDPOINT", global = true)]
    s3_endpoint: Option<String>,
    /// S3 bucket.
    #[arg(long, env = "FENCE_S3_BUCKET", global = true)]
    s3_bucket: Option<String>,
    /// S3 region.
    #[arg(
        long,
        env = "FENCE_S3_REGION",
        global = true,
        default_value = "us-east-1"
    )]
    s3_region: String,
    /// S3 access key id.
    #[arg(
        long,
        env = "FENCE_S3_ACCESS_KEY",
        global = true,
        hide_env_values = true
    )]
    s3_access_key: Option<String>,
    /// S3 secret access key.
    #[arg(
        long,
        env = "FENCE_S3_SECRET_KEY",
        global = true,
        hide_env_values = true
    )]
    s3_secret_key: Option<String>,
    /// Key prefix of the fence's objects (empty or ending in `/`).
    #[arg(long, env = "FENCE_S3_PREFIX", global = true, default_value = fence_s3::DEFAULT_PREFIX)]
    s3_prefix: String,
    /// How domains map to object keys.
    #[arg(
        long,
        env = "FENCE_S3_KEY_LAYOUT",
        global = true,
        value_enum,
        default_value = "escaped"
    )]
    s3_key_layout: S3Layout,
    /// PostgreSQL URL.
    #[arg(
        long,
        env = "FENCE_POSTGRES_URL",
        global = true,
        hide_env_values = true
    )]
    postgres_url: Option<String>,
    /// Schema of the fence's tables.
    #[arg(
        long,
        env = "FENCE_POSTGRES_SCHEMA",
        global = true,
        default_value = "fence"
    )]
    postgres_schema: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = "FENCE_KAFKA_BOOTSTRAP", global = true)]
    kafka_bootstrap: Option<String>,
    /// Extra Kafka client properties, `key=value;key=value` (security settings).
    #[arg(
        long,
        env = "FENCE_KAFKA_PROPERTIES",
        global = true,
        hide_env_values = true
    )]
    kafka_properties: Option<String>,
    /// The fenced data topic.
    #[arg(long, env = "FENCE_KAFKA_TOPIC", global = true)]
    kafka_topic: Option<String>,
    /// The fence-ledger topic.
    #[arg(long, env = "FENCE_KAFKA_LEDGER_TOPIC", global = true, default_value = fence_kafka::DEFAULT_LEDGER_TOPIC)]
    kafka_ledger_topic: String,
    /// The transactional id prefix of the domains' producers.
    #[arg(long, env = "FENCE_KAFKA_TRANSACTIONAL_ID_PREFIX", global = true, default_value = fence_kafka::DEFAULT_TRANSACTIONAL_ID_PREFIX)]
    kafka_transactional_id_prefix: String,
    /// etcd endpoints, comma-separated.
    #[arg(
        long,
        env = "FENCE_ETCD_ENDPOINTS",
        global = true,
        value_delimiter = ','
    )]
    etcd_endpoints: Vec<String>,
    /// etcd user, for a cluster with authentication (with `--etcd-password`).
    #[arg(long, env = "FENCE_ETCD_USER", global = true)]
    etcd_user: Option<String>,
    /// etcd password of `--etcd-user`.
    #[arg(
        long,
        env = "FENCE_ETCD_PASSWORD",
        global = true,
        hide_env_values = true
    )]
    etcd_password: Option<String>,
    /// Key prefix of the fence on etcd (no default: the library has none, and a wrong one
    /// would show every domain as unseen).
    #[arg(long, env = "FENCE_ETCD_PREFIX", global = true)]
    etcd_prefix: Option<String>,
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
            .field("postgres", &self.postgres_url.is_some())
            .field("etcd_endpoints", &self.etcd_endpoints)
            .field("kafka_topic", &self.kafka_topic)
            .finish_non_exhaustive()
    }
}

/// A connection failure or a missing setting, as a report.
type Connect<T> = Result<T, Report>;

/// A setting's value; an empty variable counts as unset (`FENCE_REDIS_CLUSTER= fence ...`).
fn set(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

fn missing(what: &str, variable: &str, flag: &str) -> Report {
    Report::usage(format!(
        "{what} is not configured: set {variable} or pass --{flag}"
    ))
}

impl Targets {
    /// The same settings confined to names of one `qualify` run: its own Redis prefix, S3
    /// prefix, PostgreSQL schema, etcd prefix and Kafka topics, each under the configured one.
    pub(crate) fn confined(&self, run: &str) -> Targets {
        let mut scoped = self.clone();
        scoped.redis_prefix = format!("{}:qualify-{run}", self.redis_prefix);
        scoped.s3_prefix = format!("{}qualify-{run}/", self.s3_prefix);
        scoped.postgres_schema = format!("{}_qualify_{run}", self.postgres_schema);
        scoped.etcd_prefix = Some(format!(
            "{}/qualify-{run}",
            set(&self.etcd_prefix).unwrap_or("fence")
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
            Backend::Etcd => self.etcd_endpoints = vec![routed],
            Backend::Kafka => {}
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
            Backend::Etcd if self.etcd_endpoints.len() == 1 => {
                Some(self.etcd_endpoints[0].as_str())
            }
            Backend::Etcd => return refused("name exactly one etcd endpoint"),
            Backend::Kafka => {
                return refused("Kafka brokers tell clients their own addresses; qualify Kafka without network faults (the run still pauses workers past their leases)");
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
        let config = self.kafka_config()?;
        let topic = set(&self.kafka_topic)
            .ok_or_else(|| missing("the Kafka data topic", "FENCE_KAFKA_TOPIC", "kafka-topic"))?;
        Ok((
            config,
            vec![topic.to_owned(), self.kafka_ledger_topic.clone()],
        ))
    }

    fn max_token_step(&self) -> Option<NonZeroU64> {
        NonZeroU64::new(self.max_token_step)
    }

    /// Refuses `--issued-only` for a backend that cannot see an issuer.
    fn no_issuer(&self, backend: &str) -> Connect<()> {
        if self.issued_only {
            return Err(Report::usage(format!(
                "{backend} cannot check --issued-only (FENCE_ISSUED_ONLY): no issuer is visible there; unset it"
            )));
        }
        Ok(())
    }

    /// A connected Redis fence (one of URL or cluster, never both).
    pub(crate) async fn redis(&self) -> Connect<RedisFence> {
        let nodes: Vec<String> = self
            .redis_cluster
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        let builder = match (set(&self.redis_url), nodes.is_empty()) {
            (Some(_), false) => {
                return Err(Report::usage(
                    "both FENCE_REDIS_URL and FENCE_REDIS_CLUSTER are set: set one",
                ))
            }
            (Some(url), true) => RedisFence::builder().url(url),
            (None, false) => RedisFence::builder().cluster(nodes),
            (None, true) => {
                return Err(missing(
                    "Redis",
                    "FENCE_REDIS_URL (or FENCE_REDIS_CLUSTER)",
                    "redis-url",
                ))
            }
        };
        let mut builder = builder.prefix(&self.redis_prefix);
        if let Some(step) = self.max_token_step() {
            builder = builder.max_token_step(step);
        }
        if self.issued_only {
            builder = builder.issued_only();
        }
        builder.connect().await.map_err(|e| Report::failed(&e))
    }

    /// A plain S3 client with the configured endpoint, region and credentials.
    pub(crate) fn s3_client(&self) -> Connect<fence_s3::aws_sdk_s3::Client> {
        let (Some(access), Some(secret)) = (set(&self.s3_access_key), set(&self.s3_secret_key))
        else {
            return Err(missing(
                "S3 credentials",
                "FENCE_S3_ACCESS_KEY and FENCE_S3_SECRET_KEY",
                "s3-access-key/--s3-secret-key",
            ));
        };
        let mut config = fence_s3::aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(self.s3_region.clone()))
            .credentials_provider(Credentials::new(access, secret, None, None, "fence-cli"));
        if let Some(endpoint) = set(&self.s3_endpoint) {
            config = config.endpoint_url(endpoint).force_path_style(true);
        }
        Ok(fence_s3::aws_sdk_s3::Client::from_conf(config.build()))
    }

    /// The configured bucket.
    pub(crate) fn s3_bucket(&self) -> Connect<&str> {
        set(&self.s3_bucket).ok_or_else(|| missing("the S3 bucket", "FENCE_S3_BUCKET", "s3-bucket"))
    }

    /// An S3 fence (no request made yet).
    pub(crate) fn s3(&self) -> Connect<S3Fence> {
        let layout = match self.s3_key_layout {
            S3Layout::Escaped => fence_s3::KeyLayout::Escaped,
            S3Layout::Verbatim => fence_s3::KeyLayout::Verbatim,
        };
        self.no_issuer("S3")?;
        let mut builder = S3Fence::builder()
            .client(self.s3_client()?)
            .bucket(self.s3_bucket()?)
            .prefix(&self.s3_prefix)
            .key_layout(layout);
        if let Some(step) = self.max_token_step() {
            builder = builder.max_token_step(step);
        }
        builder.build().map_err(|e| Report::failed(&e))
    }

    /// A PostgreSQL fence on a small pool.
    pub(crate) async fn postgres(&self) -> Connect<PostgresFence> {
        let url = set(&self.postgres_url)
            .ok_or_else(|| missing("PostgreSQL", "FENCE_POSTGRES_URL", "postgres-url"))?;
        let pool = fence_postgres::sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| {
                let fault = fence_core::FenceError::backend(
                    "postgres",
                    fence_core::BackendErrorKind::Unavailable,
                    None,
                    e,
                );
                Report::failed(&fault)
            })?;
        let mut fence = PostgresFence::new(pool, &self.postgres_schema)
            .map_err(|e| Report::failed(&fence_core::FenceError::from(e)))?;
        if let Some(step) = self.max_token_step() {
            fence = fence.with_max_token_step(step);
        }
        if self.issued_only {
            fence = fence.issued_only();
        }
        Ok(fence)
    }

    /// The Kafka client configuration: bootstrap servers and the extra properties.
    fn kafka_config(&self) -> Connect<fence_kafka::rdkafka::ClientConfig> {
        let bootstrap = set(&self.kafka_bootstrap)
            .ok_or_else(|| missing("Kafka", "FENCE_KAFKA_BOOTSTRAP", "kafka-bootstrap"))?;
        let mut config = fence_kafka::rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", bootstrap);
        for pair in set(&self.kafka_properties).unwrap_or_default().split(';') {
            let pair = pair.trim();
            if pair.is_empty() {
                continue;
            }
            // Never echoed: an entry may hold a password.
            let Some((key, value)) = pair.split_once('=') else {
                return Err(Report::usage(
                    "FENCE_KAFKA_PROPERTIES holds an entry without `=` (key=value entries, separated by `;`)",
                ));
            };
            config.set(key.trim(), value.trim());
        }
        Ok(config)
    }

    /// A Kafka fence on the configured topics (no topic is created).
    pub(crate) fn kafka(&self) -> Connect<fence_kafka::KafkaFence> {
        let config = self.kafka_config()?;
        let topic = set(&self.kafka_topic)
            .ok_or_else(|| missing("the Kafka data topic", "FENCE_KAFKA_TOPIC", "kafka-topic"))?;
        self.no_issuer("Kafka")?;
        let mut builder = fence_kafka::KafkaFence::builder(config)
            .data_topic(topic)
            .ledger_topic(&self.kafka_ledger_topic)
            .transactional_id_prefix(&self.kafka_transactional_id_prefix)
            .timeout(std::time::Duration::from_secs(10));
        if let Some(step) = self.max_token_step() {
            builder = builder.max_token_step(step);
        }
        builder.build().map_err(|e| Report::failed(&e))
    }

    /// An etcd handle.
    pub(crate) async fn etcd(&self) -> Connect<Etcd> {
        let endpoints: Vec<&String> = self
            .etcd_endpoints
            .iter()
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(missing("etcd", "FENCE_ETCD_ENDPOINTS", "etcd-endpoints"));
        }
        let prefix = set(&self.etcd_prefix)
            .ok_or_else(|| missing("the etcd key prefix", "FENCE_ETCD_PREFIX", "etcd-prefix"))?;
        let options = match (set(&self.etcd_user), set(&self.etcd_password)) {
            (None, None) => None,
            (Some(user), Some(password)) => Some(
                fence_etcd::etcd_client::ConnectOptions::new()
                    .with_connect_timeout(fence_etcd::DEFAULT_CONNECT_TIMEOUT)
                    .with_timeout(fence_etcd::DEFAULT_REQUEST_TIMEOUT)
                    .with_user(user, password),
            ),
            _ => {
                return Err(Report::usage(
                    "etcd authentication needs both FENCE_ETCD_USER and FENCE_ETCD_PASSWORD",
                ))
            }
        };
        Etcd::connect(&endpoints, options, prefix)
            .await
            .map_err(|e| Report::failed(&e))
    }

    /// The fenced store on etcd, with the configured bounds.
    pub(crate) fn etcd_fence(&self, etcd: &Etcd) -> fence_etcd::EtcdFence {
        let mut fence = etcd.fence();
        if let Some(step) = self.max_token_step() {
            fence = fence.with_max_token_step(step);
        }
        if self.issued_only {
            fence = fence.issued_only();
        }
        fence
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
