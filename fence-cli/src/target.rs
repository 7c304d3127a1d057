//! One backend as the commands use it, opened from the configured settings ([`Targets::open`]):
//! its fence and what each command asks of it. Each backend says here what it offers, once;
//! the commands ask the target instead of matching on the backend.

use async_trait::async_trait;
use fence_core::permissions::PermissionReport;
use fence_core::{
    Domain, Fence, FenceError, FencedStore, LeaseManager, Observed, RememberedOp, Retirer,
    TokenIssuer,
};
use fence_dynamodb::{DynamoDb, DynamoDbFence};
use fence_etcd::{Etcd, EtcdFence};
use fence_kafka::KafkaFence;
use fence_mysql::MySqlFence;
use fence_object_store::ObjectStoreFence;
use fence_postgres::PostgresFence;
use fence_redis::RedisFence;
use fence_s3::S3Fence;

use crate::report::Report;
use crate::targets::Targets;
use crate::Backend;

/// What a command may ask of an opened backend.
#[async_trait]
pub(crate) trait Target: Send + Sync {
    /// Claims and marks.
    fn fence(&self) -> &dyn Fence;

    /// Reads of the domain's entry (`None`: a log, which has no entry).
    fn store(&self) -> Option<&dyn FencedStore>;

    /// Retirement of a domain's state (`None`: the backend keeps it).
    fn retirer(&self) -> Option<&dyn Retirer>;

    /// The backend's leases (`None`: it has none).
    fn leases(&self) -> Option<Box<dyn LeaseManager>>;

    /// The backend's own token issuer (`None`: it issues no tokens).
    fn issuer(&self) -> Option<Box<dyn TokenIssuer>>;

    /// The operation ids the resource remembers for `domain` (`None`: they live in a format of
    /// the backend's own, which `fence inspect` decodes).
    async fn remembered_ops(
        &self,
        domain: &Domain,
    ) -> Option<Result<Vec<RememberedOp>, FenceError>>;

    /// Which permissions the configured credentials have.
    async fn check_permissions(&self) -> Result<PermissionReport, FenceError>;
}

impl Backend {
    /// The backend's name as the command line spells it (`object-store`).
    pub(crate) fn cli_name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map_or_else(|| format!("{self:?}"), |v| v.get_name().to_owned())
    }

    /// A log (batches appended under a token, read back in order), not a store.
    pub(crate) fn is_log(self) -> bool {
        self == Backend::Kafka
    }

    /// Refuses a token below a mark it saw accepted without asking the resource (the object
    /// fences' and fence-kafka's caches): such a refusal names that mark, maybe not the latest.
    pub(crate) fn refuses_from_cache(self) -> bool {
        matches!(self, Backend::S3 | Backend::ObjectStore | Backend::Kafka)
    }
}

impl Targets {
    /// The backend's fence, connected as its command line and environment say.
    pub(crate) async fn open(&self, backend: Backend) -> Result<Box<dyn Target>, Report> {
        Ok(match backend {
            Backend::Redis => Box::new(self.redis().await?),
            Backend::S3 => Box::new(self.s3().await?),
            Backend::ObjectStore => Box::new(self.object_store()?),
            Backend::Postgres => Box::new(self.postgres().await?),
            Backend::Mysql => Box::new(self.mysql().await?),
            Backend::Etcd => {
                let etcd = self.etcd().await?;
                Box::new(HandleTarget {
                    fence: etcd.fence(),
                    handle: etcd,
                })
            }
            Backend::Dynamodb => {
                let dynamodb = self.dynamodb().await?;
                Box::new(HandleTarget {
                    fence: dynamodb.fence(),
                    handle: dynamodb,
                })
            }
            Backend::Kafka => Box::new(self.kafka()?),
        })
    }
}

/// A store whose permissions the adapter checks itself: `leased` ones report their leases and
/// remembered operation ids too (Redis), `sql` ones alike, their leases and issuer being their
/// `FenceCore`'s (PostgreSQL, MySQL); `objects` have no leases and keep their op ids in the
/// object's envelope, which `fence inspect` decodes (S3, object stores).
macro_rules! store_target {
    ($adapter:ident, $kind:ident) => {
        #[async_trait]
        impl Target for Observed<$adapter> {
            fn fence(&self) -> &dyn Fence {
                self
            }

            fn store(&self) -> Option<&dyn FencedStore> {
                Some(self)
            }

            fn retirer(&self) -> Option<&dyn Retirer> {
                Some(self)
            }

            fn leases(&self) -> Option<Box<dyn LeaseManager>> {
                store_target!(@leases $kind, $adapter, self)
            }

            fn issuer(&self) -> Option<Box<dyn TokenIssuer>> {
                store_target!(@issuer $kind, $adapter, self)
            }

            async fn remembered_ops(
                &self,
                domain: &Domain,
            ) -> Option<Result<Vec<RememberedOp>, FenceError>> {
                store_target!(@ops $kind, $adapter, self, domain)
            }

            async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
                $adapter::check_permissions(self).await
            }
        }
    };
    (@leases leased, $adapter:ident, $fence:ident) => {
        Some(Box::new($adapter::leases($fence)))
    };
    // An SQL fence's leases and issuer are its `FenceCore`'s (it dereferences to it).
    (@leases sql, $adapter:ident, $fence:ident) => {
        Some(Box::new((**$fence).leases()))
    };
    (@leases objects, $adapter:ident, $fence:ident) => {
        None
    };
    (@issuer leased, $adapter:ident, $fence:ident) => {
        Some(Box::new($adapter::issuer($fence)))
    };
    (@issuer sql, $adapter:ident, $fence:ident) => {
        Some(Box::new((**$fence).issuer()))
    };
    (@issuer objects, $adapter:ident, $fence:ident) => {
        None
    };
    (@ops leased, $adapter:ident, $fence:ident, $domain:ident) => {
        Some($adapter::remembered_ops($fence, $domain).await)
    };
    (@ops sql, $adapter:ident, $fence:ident, $domain:ident) => {
        Some((**$fence).remembered_ops($domain).await)
    };
    (@ops objects, $adapter:ident, $fence:ident, $domain:ident) => {{
        let _ = ($fence, $domain);
        None
    }};
}

store_target!(RedisFence, leased);
store_target!(PostgresFence, sql);
store_target!(MySqlFence, sql);
store_target!(S3Fence, objects);
store_target!(ObjectStoreFence, objects);

/// Kafka is a log: no entry, no retirement (records stay in the topics), no leases; its op ids
/// live in the fence-ledger record.
#[async_trait]
impl Target for Observed<KafkaFence> {
    fn fence(&self) -> &dyn Fence {
        self
    }

    fn store(&self) -> Option<&dyn FencedStore> {
        None
    }

    fn retirer(&self) -> Option<&dyn Retirer> {
        None
    }

    fn leases(&self) -> Option<Box<dyn LeaseManager>> {
        None
    }

    fn issuer(&self) -> Option<Box<dyn TokenIssuer>> {
        None
    }

    async fn remembered_ops(&self, _: &Domain) -> Option<Result<Vec<RememberedOp>, FenceError>> {
        None
    }

    async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        KafkaFence::check_permissions(self).await
    }
}

/// A backend whose fence, leases and issuer come from one handle, which also checks the
/// permissions (etcd, DynamoDB).
struct HandleTarget<H, F> {
    handle: H,
    fence: Observed<F>,
}

/// Implements [`Target`] for a backend of one handle.
macro_rules! handle_target {
    ($handle:ident, $fence:ident) => {
        #[async_trait]
        impl Target for HandleTarget<$handle, $fence> {
            fn fence(&self) -> &dyn Fence {
                &self.fence
            }

            fn store(&self) -> Option<&dyn FencedStore> {
                Some(&self.fence)
            }

            fn retirer(&self) -> Option<&dyn Retirer> {
                Some(&self.fence)
            }

            fn leases(&self) -> Option<Box<dyn LeaseManager>> {
                Some(Box::new(self.handle.leases()))
            }

            fn issuer(&self) -> Option<Box<dyn TokenIssuer>> {
                Some(Box::new(self.handle.issuer()))
            }

            async fn remembered_ops(
                &self,
                domain: &Domain,
            ) -> Option<Result<Vec<RememberedOp>, FenceError>> {
                Some(self.fence.remembered_ops(domain).await)
            }

            async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
                self.handle.check_permissions().await
            }
        }
    };
}

handle_target!(Etcd, EtcdFence);
handle_target!(DynamoDb, DynamoDbFence);
