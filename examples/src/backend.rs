//! Which resource and lease manager a demo runs on, chosen with `--backend NAME`.

use std::sync::Arc;

use fence_core::{Domain, LeaseManager, MemoryFence, MemoryLeases, Observed, Retirer};

use crate::Resource;

/// A backend the demos can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The embedded in-memory resource and leases: no servers needed.
    Memory,
    /// Redis: `FENCE_REDIS_URL` or `FENCE_REDIS_CLUSTER`, else the project's Redis
    /// ([`crate::local::REDIS_URL`]).
    Redis,
    /// S3: `FENCE_S3_ENDPOINT` / `FENCE_S3_BUCKET` / `FENCE_S3_ACCESS_KEY` / `FENCE_S3_SECRET_KEY`,
    /// else the project's SeaweedFS. Leases come from memory: S3 has none, and the object
    /// fences on its own.
    S3,
    /// Kafka: `FENCE_KAFKA_BOOTSTRAP`, else the project's broker; topics created per run and
    /// deleted by [`DemoBackend::finish`]. Leases come from memory; the broker and the fence
    /// ledger enforce the token.
    Kafka,
    /// PostgreSQL: `FENCE_POSTGRES_URL`, else the project's PostgreSQL; the fence's tables in
    /// schema `fence_demo`. Leases in PostgreSQL too.
    Postgres,
    /// MySQL or MariaDB: `FENCE_MYSQL_URL`, else the project's MariaDB; the fence's tables in
    /// database `fence_demo`. Leases in MySQL too.
    Mysql,
}

impl Backend {
    /// Every backend, in the order `--help` lists them.
    pub const ALL: &'static [(&'static str, Backend)] = &[
        ("memory", Backend::Memory),
        ("redis", Backend::Redis),
        ("s3", Backend::S3),
        ("kafka", Backend::Kafka),
        ("postgres", Backend::Postgres),
        ("mysql", Backend::Mysql),
    ];

    /// Reads `--backend NAME` (or `--backend=NAME`) from the arguments; memory by default.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Backend, String> {
        match crate::cli::backend_name(args)? {
            Some(name) => Self::named(&name),
            None => Ok(Backend::Memory),
        }
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

    /// Connects to the backend and returns its store and lease manager. A build without the
    /// `servers` feature has the memory backend only (and compiles no server client).
    pub async fn open(self) -> Result<DemoBackend, Box<dyn std::error::Error>> {
        match self {
            Backend::Memory => {
                let store = Arc::new(Observed::new(MemoryFence::new()));
                Ok(DemoBackend {
                description: "memory (embedded, no servers)".into(),
                resource: Resource::Store(store.clone()),
                retirer: Some(store),
                leases: Arc::new(Observed::new(MemoryLeases::new())),
                #[cfg(feature = "servers")]
                kafka: None,
            })
            }
            #[cfg(feature = "servers")]
            server => crate::connect::open(server).await,
            #[cfg(not(feature = "servers"))]
            other => Err(format!(
                "this build has the memory backend only; for {other:?} run with `--features servers` \
                 (cargo run --features servers --example ...)"
            )
            .into()),
        }
    }
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
    /// What removes a run's domain (stores; Kafka's topics are deleted instead).
    pub(crate) retirer: Option<Arc<dyn Retirer>>,
    /// The run's Kafka topics, deleted by [`DemoBackend::finish`].
    #[cfg(feature = "servers")]
    pub(crate) kafka: Option<Observed<fence_kafka::KafkaFence>>,
}

impl DemoBackend {
    /// Removes what the run created: its `domain` at a store, its topics on Kafka.
    pub async fn finish(self, domain: &Domain) -> Result<(), crate::ExampleError> {
        if let Some(retirer) = &self.retirer {
            crate::retire_run(retirer.as_ref(), domain).await?;
        }
        #[cfg(feature = "servers")]
        if let Some(fence) = &self.kafka {
            crate::connect::delete_kafka_topics(fence).await?;
        }
        Ok(())
    }
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
