//! Shared pieces of the Fence examples: choosing a backend and printing a timeline.

mod backend;
mod timeline;

pub use backend::{redis_builder, s3_fence_from_env, Backend, DemoBackend};
pub use timeline::Timeline;
