//! The conformance suite for fenced transactions, an entry point that is not a trait method:
//! each run adds one to a counter row of a user table in the fenced transaction, so the
//! counter, read at the server, counts the runs that committed (fence-testkit's harness).

fence_conformance::entry_conformance!(
    fence_testkit::sql::counted_transactions::<fence_mysql::MySqlDialect>
);
