//! Shared pieces of the Fence examples: choosing a backend and printing a timeline. Without the
//! `servers` feature only the embedded memory backend is built, so the first demo compiles no
//! server client (no AWS SDK, no librdkafka).

#[cfg(feature = "servers")]
mod accounts;
mod backend;
mod cleanup;
mod cli;
#[cfg(feature = "servers")]
mod connect;
#[cfg(feature = "servers")]
mod receipts;
mod resource;
mod shutdown;
mod timeline;

#[cfg(feature = "servers")]
pub use accounts::{account_worker, Accounts};
pub use backend::{Backend, DemoBackend};
pub use cleanup::retire_run;
#[cfg(feature = "servers")]
pub use cleanup::{retire_mysql_run, retire_postgres_run};
pub use cli::{backend_arg, help_requested, no_arguments, run_example, ExampleError, ENVIRONMENT};
#[cfg(feature = "servers")]
pub use connect::{
    create_kafka_topics, delete_kafka_topics, kafka_fence_for_run, local, mysql_fence,
    postgres_fence, redis_fence, s3_fence, Unreachable, CONNECT_TIMEOUT, MYSQL_DATABASE,
    POSTGRES_SCHEMA,
};
#[cfg(feature = "servers")]
pub use receipts::{settled_entries, ReceiptWebhook};
pub use resource::Resource;
pub use shutdown::{after_cleanup, until_shutdown, Interrupted};
pub use timeline::Timeline;
