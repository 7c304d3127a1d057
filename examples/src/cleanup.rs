//! Removing what an example's run created, once the run is over: every worker of the run has
//! ended, so no token of it can write again (the retirement procedure of LIFECYCLE.md, which
//! a real deployment follows with care: a paused process may outlive its lease).

use std::time::{Duration, Instant};

use fence_core::{Domain, FenceError, Retirer};

use crate::ExampleError;

/// How long a retirement waits for a lease the run still holds to expire: longer than any
/// lease an example takes. A run stopped by a signal leaves its leases to expire (a held lease
/// is never released by a process that was told to stop in the middle of its work).
const LEASE_EXPIRY_WAIT: Duration = Duration::from_secs(15);

/// Retires the run's `domain` at its resource and says how much went. A resource refuses to
/// retire a domain whose lease is held; the run's own leases are waited out.
pub async fn retire_run(retirer: &dyn Retirer, domain: &Domain) -> Result<(), ExampleError> {
    let deadline = Instant::now() + LEASE_EXPIRY_WAIT;
    let mut said = false;
    let retired = loop {
        match retirer.retire(domain).await {
            Err(FenceError::LeaseHeld { .. }) if Instant::now() < deadline => {
                if !said {
                    println!("cleaning up: waiting for the run's lease on `{domain}` to expire");
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            outcome => break outcome?,
        }
    };
    println!(
        "cleaned up: the run's domain `{domain}` retired ({} keys, rows or objects removed)",
        retired.removed
    );
    Ok(())
}

/// Deletes the run's rows of the example's own `table` (`id` = the domain) and of the outbox
/// tables, then retires the domain's fence rows.
#[cfg(feature = "servers")]
pub async fn retire_postgres_run(
    fence: &fence_core::Observed<fence_postgres::PostgresFence>,
    table: &str,
    domain: &Domain,
) -> Result<(), ExampleError> {
    let schema = fence.schema();
    let mut tx = fence.pool().begin().await?;
    for statement in [
        format!("DELETE FROM {schema}.{table} WHERE id = $1"),
        format!("DELETE FROM {schema}.fence_outbox_entries WHERE domain = $1"),
        format!("DELETE FROM {schema}.fence_outbox_domains WHERE domain = $1"),
    ] {
        sqlx::query(&statement)
            .bind(domain.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    retire_run(fence, domain).await
}

/// [`retire_postgres_run`] on MySQL: the run's rows of `table` and of the outbox tables, then
/// the domain's fence rows.
#[cfg(feature = "servers")]
pub async fn retire_mysql_run(
    fence: &fence_core::Observed<fence_mysql::MySqlFence>,
    table: &str,
    domain: &Domain,
) -> Result<(), ExampleError> {
    let database = fence.database();
    let mut tx = fence.pool().begin().await?;
    for statement in [
        format!("DELETE FROM {database}.{table} WHERE id = ?"),
        format!("DELETE FROM {database}.fence_outbox_entries WHERE domain = ?"),
        format!("DELETE FROM {database}.fence_outbox_domains WHERE domain = ?"),
    ] {
        sqlx::query(&statement)
            .bind(domain.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    retire_run(fence, domain).await
}
