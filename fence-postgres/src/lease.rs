//! A token issuer and leases in PostgreSQL: a per-domain counter floored at the domain's mark,
//! and lease expiry decided by the server's clock (fence-sql's, for PostgreSQL); waiters are
//! woken by the release itself.

use std::time::Duration;

use fence_core::Domain;
use fence_sql::FenceCore;
use sqlx::postgres::{PgListener, PgPoolOptions};

use crate::dialect::PostgresDialect;
use crate::error::map_error;

/// Issues tokens from `<schema>.fence_counters` (`PostgresFence::issuer`): one row per domain,
/// never deleted by Fence, each issue floored at the domain's mark in `fence_marks`, so a
/// recreated or restored counter never issues a token the resource has already seen. Durable
/// across restarts.
pub type PostgresIssuer = fence_sql::SqlIssuer<PostgresDialect>;

/// Leases in `<schema>.fence_leases` (`PostgresFence::leases`), whose tokens come from the
/// issuer's counter. Expiry is decided by the server's clock (`clock_timestamp()`), never a
/// client's. A waiting [`fence_core::LeaseGuard::acquire`] is woken by the release itself
/// (`NOTIFY` on `fence_lease_released` once the release committed; each waiter listens on a
/// connection of its own, outside the pool, while it waits) or at the holder's expiry by the
/// server's clock: no polling.
pub type PostgresLeases = fence_sql::SqlLeases<PostgresDialect>;

/// The channel releases are notified on; the payload is `<schema>\n<domain>`.
const RELEASE_CHANNEL: &str = "fence_lease_released";

/// The notification payload of a release of `domain`'s lease in `core`'s schema.
fn release_payload(core: &FenceCore<PostgresDialect>, domain: &Domain) -> String {
    format!("{}\n{}", core.tables().name(), domain.as_str())
}

/// Notifies the waiters of `domain`'s lease in `core`'s schema that it was released, on `conn`.
pub(crate) async fn notify_release(
    conn: &mut sqlx::PgConnection,
    core: &FenceCore<PostgresDialect>,
    domain: &Domain,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(RELEASE_CHANNEL)
        .bind(release_payload(core, domain))
        .execute(conn)
        .await
        .map(drop)
}

/// Waits until `domain`'s lease is released (a notification) or has expired by the server's
/// clock, at most `within`.
pub(crate) async fn wait_for_release(
    core: &FenceCore<PostgresDialect>,
    domain: &Domain,
    within: Duration,
) {
    match tokio::time::timeout(within, released(core, domain)).await {
        Ok(Ok(())) | Err(_) => {}
        Ok(Err(error)) => {
            // Unreachable now: the caller's next attempt reports it; do not spin meanwhile.
            tracing::debug!(%error, domain = domain.as_str(), "listening for a release failed");
            tokio::time::sleep(within.min(Duration::from_millis(50))).await;
        }
    }
}

/// Returns once `domain`'s lease is released (a notification) or has expired by the server's
/// clock (read after listening, so a release in between is not missed).
async fn released(
    core: &FenceCore<PostgresDialect>,
    domain: &Domain,
) -> Result<(), fence_core::FenceError> {
    let sql_error = |e| map_error(e, domain, fence_core::Operation::Lease, false);
    // A connection of its own, outside the pool: waiters never starve the holders' renewals
    // of pool connections.
    let own = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with((*core.pool().connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await.map_err(sql_error)?;
    listener.listen(RELEASE_CHANNEL).await.map_err(sql_error)?;
    let left_ms: Option<f64> = sqlx::query_scalar(&format!(
        "SELECT (extract(epoch FROM expires - clock_timestamp()) * 1000)::float8 \
         FROM {} WHERE domain = $1",
        core.tables().leases()
    ))
    .bind(domain.as_str())
    .fetch_optional(&mut listener)
    .await
    .map_err(sql_error)?;
    let Some(left_ms) = left_ms.filter(|ms| ms.is_finite() && *ms > 0.0) else {
        return Ok(());
    };
    let expiry = Duration::from_secs_f64(left_ms.min(1e9) / 1000.0);
    let payload = release_payload(core, domain);
    let notified = async {
        loop {
            let notification = listener.recv().await.map_err(sql_error)?;
            if notification.payload() == payload {
                return Ok(());
            }
        }
    };
    tokio::time::timeout(expiry, notified)
        .await
        .unwrap_or(Ok(()))
}
