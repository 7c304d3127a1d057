#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
pub mod env;
mod error;
mod fence;
mod handle;
mod issuer;
mod keys;
mod lease;
mod lock;
mod permissions;
mod rebase;
mod retire;
mod settings;
mod state;

pub use config::EtcdFenceBuilder;
pub use error::{EtcdFenceError, BACKEND};
pub use etcd_client;
pub use fence::{
    EtcdFence, DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_OP_ID_RETENTION,
};
pub use handle::{Etcd, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
pub use issuer::EtcdIssuer;
pub use keys::MAX_PREFIX_BYTES;
pub use lease::{EtcdLeases, MAX_LEASE_TTL_SECS};
pub use lock::lock_token;
