//! Shared pieces of the Fence examples: choosing a backend and printing a timeline.

mod backend;
mod receipts;
mod resource;
mod timeline;

pub use backend::{kafka_fence_for_run, redis_builder, s3_fence_from_env, Backend, DemoBackend};
pub use receipts::ReceiptWebhook;
pub use resource::Resource;
pub use timeline::Timeline;
