//! Shared pieces of the Fence examples: choosing a backend and printing a timeline.

mod backend;
mod timeline;

pub use backend::{redis_builder, Backend, DemoBackend};
pub use timeline::Timeline;
