//! The torture run on PostgreSQL: a server of the test's own behind the fault proxy (cuts,
//! delays, black holes, kill -9 of every server process and restart on its WAL), leases and
//! tokens from the same schema.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_core::Domain;
use fence_postgres::sqlx::postgres::PgPoolOptions;
use fence_postgres::PostgresFence;
use fence_testkit::postgres::{address, PostgresServer};
use fence_torture::{engine, ProxyFaults, ServerProcess, Target};

struct Postgres(PostgresServer);

impl ServerProcess for Postgres {
    fn kill_and_restart(&self) {
        self.0.kill_and_restart();
    }

    /// Not called: a PostgreSQL server is many processes, so it is not offered pauses.
    fn signal(&self, _: &str) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_holds_under_torture() {
    let Some(server) = PostgresServer::start("torture") else {
        return;
    };
    let url = server.url();
    let schema = "fence_torture";
    fence_postgres::migrate(&fence_testkit::postgres::pool(&url).await, schema)
        .await
        .unwrap();
    let upstream = address(&url).parse().unwrap();
    let proxy = Arc::new(TcpProxy::start(upstream).await.unwrap());
    let proxied = url.replace(&upstream.to_string(), &proxy.address().to_string());
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&proxied)
        .unwrap();
    let fence = PostgresFence::builder(pool, schema).build().unwrap();
    let faults = ProxyFaults::new(proxy).with_server(Arc::new(Postgres(server)));
    let target = Target::new(
        Arc::new(fence.clone()),
        Arc::new(fence.leases()),
        Domain::new("torture/postgres").unwrap(),
    )
    .with_faults(Arc::new(faults));
    let profile = support::profile(support::seed(41), Duration::from_millis(300), true);
    let run = engine::run(&profile, &target).await;
    support::verify("postgres", &run, true);
}
