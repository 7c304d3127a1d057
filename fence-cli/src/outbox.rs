//! `fence outbox`: a domain's outbox entries (pending, delivered within retention, dead
//! letters), the relay's lag on it, and discarding a dead letter an operator has dealt with.

use std::fmt::Write as _;

use fence_core::Domain;
use fence_outbox::{EffectKinds, EntryStatus, OutboxEntry, OutboxError};
use fence_outbox_dynamodb::DynamoDbOutbox;
use fence_outbox_mysql::MySqlOutbox;
use fence_outbox_postgres::PostgresOutbox;
use fence_outbox_redis::RedisOutbox;
use serde_json::{json, Value};

use crate::report::{bytes_json, Exit, Report};
use crate::targets::Targets;
use crate::OutboxBackend;

/// One backend's operator calls.
enum Outbox {
    Redis(RedisOutbox),
    Postgres(PostgresOutbox),
    Mysql(MySqlOutbox),
    Dynamodb(DynamoDbOutbox),
}

impl Outbox {
    async fn open(targets: &Targets, backend: OutboxBackend) -> Result<Outbox, Report> {
        // Listing and discarding need no effect kinds: those check new entries only.
        Ok(match backend {
            OutboxBackend::Redis => {
                Outbox::Redis(RedisOutbox::new(targets.redis().await?, EffectKinds::new()))
            }
            OutboxBackend::Postgres => Outbox::Postgres(PostgresOutbox::new(
                targets.postgres().await?,
                EffectKinds::new(),
            )),
            OutboxBackend::Mysql => {
                Outbox::Mysql(MySqlOutbox::new(targets.mysql().await?, EffectKinds::new()))
            }
            OutboxBackend::Dynamodb => {
                let table = targets.dynamodb_outbox_table()?;
                let fence = targets.dynamodb().await?.fence();
                Outbox::Dynamodb(
                    DynamoDbOutbox::new(fence, table, EffectKinds::new()).map_err(failed)?,
                )
            }
        })
    }

    async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        match self {
            Outbox::Redis(outbox) => outbox.entries(domain).await,
            Outbox::Postgres(outbox) => outbox.entries(domain).await,
            Outbox::Mysql(outbox) => outbox.entries(domain).await,
            Outbox::Dynamodb(outbox) => outbox.entries(domain).await,
        }
    }

    async fn redrive(&self, domain: &Domain, seq: u64) -> Result<Option<u64>, OutboxError> {
        match self {
            Outbox::Redis(outbox) => outbox.redrive_dead_letter(domain, seq).await,
            Outbox::Postgres(outbox) => outbox.redrive_dead_letter(domain, seq).await,
            Outbox::Mysql(outbox) => outbox.redrive_dead_letter(domain, seq).await,
            Outbox::Dynamodb(outbox) => outbox.redrive_dead_letter(domain, seq).await,
        }
    }

    async fn discard(&self, domain: &Domain, seq: u64) -> Result<bool, OutboxError> {
        match self {
            Outbox::Redis(outbox) => outbox.discard_dead_letter(domain, seq).await,
            Outbox::Postgres(outbox) => outbox.discard_dead_letter(domain, seq).await,
            Outbox::Mysql(outbox) => outbox.discard_dead_letter(domain, seq).await,
            Outbox::Dynamodb(outbox) => outbox.discard_dead_letter(domain, seq).await,
        }
    }
}

fn failed(error: OutboxError) -> Report {
    match error {
        OutboxError::Fence(error) => Report::failed(&error),
        // Listing and discarding raise no other outbox error; report one plainly if they do.
        other => Report::usage(other.to_string()).with_exit(Exit::Failed, "failed"),
    }
}

fn domain(name: &str) -> Result<Domain, Report> {
    Domain::new(name).map_err(|e| Report::failed(&e.into()))
}

/// `fence outbox list`.
pub(crate) async fn list(targets: &Targets, backend: OutboxBackend, name: &str) -> Report {
    let listed = async {
        let domain = domain(name)?;
        let outbox = Outbox::open(targets, backend).await?;
        let entries = outbox.entries(&domain).await.map_err(failed)?;
        Ok::<_, Report>((domain, entries))
    };
    let (domain, entries) = match listed.await {
        Ok(listed) => listed,
        Err(report) => return report,
    };
    let pending: Vec<&OutboxEntry> = entries
        .iter()
        .filter(|e| matches!(e.status, EntryStatus::Pending { .. }))
        .collect();
    let dead = entries
        .iter()
        .filter(|e| matches!(e.status, EntryStatus::DeadLettered { .. }))
        .count();
    // The relay's lag on this domain: how long its oldest pending entry has waited.
    let lag = pending.first().map(|e| e.age());
    let json = json!({
        "domain": domain.as_str(),
        "pending": pending.len(),
        "dead_lettered": dead,
        "lag_ms": lag.map(|l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
        "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
    });
    let mut text = format!(
        "domain  {domain}\npending {}{}\ndead    {dead}\n",
        pending.len(),
        lag.map_or(String::new(), |l| format!(
            " (oldest waiting {:.1} s)",
            l.as_secs_f64()
        ))
    );
    for entry in &entries {
        let _ = writeln!(
            text,
            "#{:<4} {:<13} {} -> {} (key {}, token {}, {} attempts){}",
            entry.seq,
            status_name(&entry.status),
            entry.kind,
            entry.destination,
            entry.key,
            entry.token,
            entry.attempts(),
            match &entry.status {
                EntryStatus::Pending {
                    last_error: Some(e),
                    ..
                }
                | EntryStatus::DeadLettered { last_error: e, .. } => format!(": {e}"),
                _ => String::new(),
            }
        );
    }
    Report::done(json, text.trim_end().to_owned())
}

/// `fence outbox discard`.
pub(crate) async fn discard(
    targets: &Targets,
    backend: OutboxBackend,
    name: &str,
    seq: u64,
) -> Report {
    let discarded = async {
        let domain = domain(name)?;
        let outbox = Outbox::open(targets, backend).await?;
        let removed = outbox.discard(&domain, seq).await.map_err(failed)?;
        Ok::<_, Report>((domain, removed))
    };
    match discarded.await {
        Ok((domain, true)) => Report::done(
            json!({ "domain": domain.as_str(), "seq": seq, "discarded": true }),
            format!("discarded dead letter #{seq} of `{domain}`"),
        ),
        Ok((domain, false)) => Report::usage(format!(
            "entry #{seq} of `{domain}` is not a dead letter (pending, delivered or gone): nothing discarded"
        ))
        .with_exit(Exit::NotFound, "not_found"),
        Err(report) => report,
    }
}

/// `fence outbox redrive`.
pub(crate) async fn redrive(
    targets: &Targets,
    backend: OutboxBackend,
    name: &str,
    seq: u64,
) -> Report {
    let redriven = async {
        let domain = domain(name)?;
        let outbox = Outbox::open(targets, backend).await?;
        let new_seq = outbox.redrive(&domain, seq).await.map_err(failed)?;
        Ok::<_, Report>((domain, new_seq))
    };
    match redriven.await {
        Ok((domain, Some(new_seq))) => Report::done(
            json!({ "domain": domain.as_str(), "seq": seq, "new_seq": new_seq }),
            format!("re-drove dead letter #{seq} of `{domain}`: pending again as #{new_seq}"),
        ),
        Ok((domain, None)) => Report::usage(format!(
            "entry #{seq} of `{domain}` is not a dead letter (pending, delivered or gone): nothing re-driven"
        ))
        .with_exit(Exit::NotFound, "not_found"),
        Err(report) => report,
    }
}

fn status_name(status: &EntryStatus) -> &'static str {
    match status {
        EntryStatus::Pending { .. } => "pending",
        EntryStatus::Delivered { .. } => "delivered",
        EntryStatus::DeadLettered { .. } => "dead-lettered",
        _ => "unknown",
    }
}

fn entry_json(entry: &OutboxEntry) -> Value {
    let (settled_at_ms, last_error) = match &entry.status {
        EntryStatus::Pending { last_error, .. } => (None, last_error.clone()),
        EntryStatus::Delivered { at_ms, .. } => (Some(*at_ms), None),
        EntryStatus::DeadLettered {
            at_ms, last_error, ..
        } => (Some(*at_ms), Some(last_error.clone())),
        _ => (None, None),
    };
    json!({
        "seq": entry.seq,
        "status": status_name(&entry.status),
        "attempts": entry.attempts(),
        "key": entry.key.as_str(),
        "kind": entry.kind,
        "destination": entry.destination,
        "token": entry.token.to_string(),
        "recorded_at_ms": entry.recorded_at_ms,
        "settled_at_ms": settled_at_ms,
        "last_error": last_error,
        "payload": bytes_json(&entry.payload),
    })
}
