#![doc = include_str!("../README.md")]

mod codec;
mod outbox;
mod reply;
mod scripts;
mod store;

pub use outbox::{OutboxScript, RedisOutbox, RedisRecorded, RedisTransition};
