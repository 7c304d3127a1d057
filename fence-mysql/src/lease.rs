//! A token issuer and leases in MySQL: a per-domain counter floored at the domain's mark, and
//! lease expiry decided by the server's clock (fence-sql's, for MySQL).

use std::time::Duration;

use crate::dialect::MySqlDialect;

/// The longest lease TTL: a `DATETIME(6)` ends in the year 9999.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Issues tokens from `<database>.fence_counters` (`MySqlFence::issuer`): one row per domain,
/// never deleted by Fence, each issue floored at the domain's mark in `fence_marks`, so a
/// recreated or restored counter never issues a token the resource has already seen. Durable
/// across restarts.
pub type MySqlIssuer = fence_sql::SqlIssuer<MySqlDialect>;

/// Leases in `<database>.fence_leases` (`MySqlFence::leases`), whose tokens come from the
/// issuer's counter. Expiry is decided by the server's clock (`UTC_TIMESTAMP(6)`), never a
/// client's; TTLs up to [`MAX_LEASE_TTL`]. MySQL has no notifications: a waiting
/// [`fence_core::LeaseGuard::acquire`] polls (25–50 ms).
pub type MySqlLeases = fence_sql::SqlLeases<MySqlDialect>;
