//! The torture run on etcd: a member of the test's own behind the fault proxy (cuts, delays,
//! black holes, SIGSTOP, kill -9 and restart on its WAL), leases whose token is the lock key's
//! create_revision, and etcd's KV as the fenced store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_core::Domain;
use fence_etcd::etcd_client::ConnectOptions;
use fence_etcd::Etcd;
use fence_testkit::etcd::{address, EtcdServer};
use fence_torture::{engine, ProxyFaults, ServerProcess, Target};

struct Member(EtcdServer);

impl ServerProcess for Member {
    fn kill_and_restart(&self) {
        self.0.kill_and_restart();
    }

    fn signal(&self, signal: &str) {
        self.0.signal(signal);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_holds_under_torture() {
    let Some(server) = EtcdServer::start("torture") else {
        return;
    };
    let proxy = Arc::new(
        TcpProxy::start(address(&server.endpoint()).parse().unwrap())
            .await
            .unwrap(),
    );
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    let etcd = Etcd::connect(
        &[format!("http://{}", proxy.address())],
        Some(options),
        "/torture",
    )
    .await
    .unwrap();
    let faults = ProxyFaults::new(proxy)
        .with_server(Arc::new(Member(server)))
        .with_pauses();
    let target = Target::new(
        Arc::new(etcd.fence()),
        Arc::new(etcd.leases()),
        Domain::new("torture/etcd").unwrap(),
    )
    .with_faults(Arc::new(faults));
    let profile = support::profile(support::seed(51), Duration::from_secs(1), true);
    let run = engine::run(&profile, &target).await;
    support::verify("etcd", &run, true);
}
