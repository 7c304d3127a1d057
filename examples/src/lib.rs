//! Shared pieces of the Fence examples: choosing a backend and printing a timeline.

mod backend;
mod receipts;
mod resource;
mod timeline;

pub use backend::{
    kafka_fence_for_run, postgres_fence, redis_builder, s3_fence_from_env, Backend, DemoBackend,
    POSTGRES_SCHEMA,
};
pub use receipts::{settled_entries, ReceiptWebhook};
pub use resource::Resource;
pub use timeline::Timeline;
