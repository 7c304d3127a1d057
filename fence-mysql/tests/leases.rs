//! The MySQL issuer and leases against MariaDB: fence-testkit's SQL lease tests (the shared
//! lease contract, a counter floored at the mark when its row is recreated, exhaustion, the
//! issuer monotonic across a kill -9 of the server, a retired domain leaving no rows).

fence_testkit::sql_lease_tests!(fence_mysql::MySqlDialect);
