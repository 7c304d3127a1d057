//! The Redis outbox: entries recorded inside the fenced Lua script, under the domain's hash tag.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<prefix>:{<domain>}:state` | hash | the domain's fence state (high-water mark) |
//! | `<prefix>:{<domain>}:u:ob:meta` | hash | `outbox`=1, `domain`, `partition`, `last`, `done`, `purged`, `relay` |
//! | `<prefix>:{<domain>}:u:ob:entries` | hash | `<seq>`: the packed record (time, token, key, kind, destination, payload), written once; `<seq>:s` status (absent while pending), `:a` attempts, `:e` last error, `:f` settle time, `:by` relay token |
//! | `<prefix>:outbox:{p<partition>}:index` | hash | domain → version: domains with work |
//!
//! Every key of a transition shares the domain's hash tag, so the transition is one
//! single-slot script on Redis Cluster. The partition index lives in another slot; it is a
//! hint written right after the transition, and the relay's periodic sweep recovers any
//! domain whose hint was lost (a crash between the script and the hint).

mod codec;
mod outbox;
mod reply;
mod scripts;
mod store;

pub use outbox::{OutboxScript, Recorded, RedisOutbox, Transition};
