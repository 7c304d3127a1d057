//! The conformance suite against real PostgreSQL servers, one per scenario (so the restart
//! scenario can kill -9 its own server): fence-testkit's SQL store harness.

fence_conformance::store_conformance!(
    fence_testkit::sql::dedicated::<fence_postgres::PostgresDialect>
);

#[tokio::test]
async fn declared_capabilities_are_pinned() {
    fence_testkit::sql::declared_capabilities_are_pinned::<fence_postgres::PostgresDialect>();
}
