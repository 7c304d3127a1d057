//! The torture run on MariaDB (fence-mysql): a server of the test's own behind the fault proxy
//! (cuts, delays, black holes, pauses of the one server process, kill -9 and restart on its
//! redo log), leases and tokens from the same database.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_core::Domain;
use fence_mysql::sqlx::mysql::MySqlPoolOptions;
use fence_mysql::MySqlFence;
use fence_testkit::mysql::{address, MariaDbServer};
use fence_torture::{engine, ProxyFaults, ServerProcess, Target};

struct MariaDb(MariaDbServer);

impl ServerProcess for MariaDb {
    fn kill_and_restart(&self) {
        self.0.kill_and_restart();
    }

    fn signal(&self, signal: &str) {
        self.0.signal(signal);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_holds_under_torture() {
    let Some(server) = MariaDbServer::start("torture") else {
        return;
    };
    let url = server.url();
    let database = "fence_torture";
    fence_mysql::migrate(&fence_testkit::mysql::pool(&url).await, database)
        .await
        .unwrap();
    let upstream = address(&url).parse().unwrap();
    let proxy = Arc::new(TcpProxy::start(upstream).await.unwrap());
    let proxied = url.replace(&upstream.to_string(), &proxy.address().to_string());
    let pool = MySqlPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&proxied)
        .unwrap();
    let fence = MySqlFence::builder(pool, database).build().unwrap();
    let faults = ProxyFaults::new(proxy)
        .with_server(Arc::new(MariaDb(server)))
        .with_pauses();
    let target = Target::new(
        Arc::new(fence.clone()),
        Arc::new(fence.leases()),
        Domain::new("torture/mysql").unwrap(),
    )
    .with_faults(Arc::new(faults));
    let profile = support::profile(support::seed(71), Duration::from_millis(300), true);
    let run = engine::run(&profile, &target).await;
    support::verify("mysql", &run, true);
}
