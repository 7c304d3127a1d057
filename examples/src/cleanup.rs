//! Removing what an example's run created, once the run is over: every worker of the run has
//! ended, so no token of it can write again (the retirement procedure of LIFECYCLE.md, which
//! a real deployment follows with care: a paused process may outlive its lease).

use fence_core::{Domain, Retirer};

use crate::ExampleError;

/// Retires the run's `domain` at its resource and says how much went.
pub async fn retire_run(retirer: &dyn Retirer, domain: &Domain) -> Result<(), ExampleError> {
    let retired = retirer.retire(domain).await?;
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
