//! What this crate's tests start from: a fresh prefix on the shared etcd, or a server a test
//! owns.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::time::Duration;

use fence_etcd::etcd_client::ConnectOptions;
use fence_etcd::Etcd;
use fence_testkit::etcd::{shared_endpoints, unique_prefix};

/// Short timeouts, so a stopped server fails a request within a second or two.
pub(crate) fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2))
}

/// A client of `endpoint` under `prefix`.
pub(crate) async fn connect(endpoint: &str, prefix: &str) -> Etcd {
    Etcd::connect(&[endpoint], Some(options()), prefix)
        .await
        .expect("connect to etcd")
}

/// A fresh prefix named after `test` on the shared etcd (`None`: a loud skip outside the test
/// command).
pub(crate) async fn shared(test: &str) -> Option<Etcd> {
    let endpoints = shared_endpoints()?;
    Some(connect(&endpoints[0], &unique_prefix(test)).await)
}
