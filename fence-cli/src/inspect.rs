//! `fence inspect <backend> <domain>`: the mark, the entry, the remembered operation ids and
//! the lease holder, as the resource holds them.

use std::fmt::Write as _;

use fence_core::{Domain, Entry, FenceError, FencedStore, LeaseHolder, RememberedOp};
use fence_s3::Envelope;
use serde_json::{json, Value};

use crate::report::{entry_json, entry_text, token_json, Report};
use crate::target::Target;
use crate::targets::Targets;
use crate::Backend;

/// A remembered operation id, whichever backend holds it.
struct Op {
    token: String,
    op_id: String,
    kind: String,
    previous: Value,
    outcome: String,
}

/// What one backend shows of a domain.
struct Inspection {
    backend: &'static str,
    domain: Domain,
    /// Where the state lives (key, object), when one place holds it.
    location: Option<String>,
    snapshot: fence_core::Snapshot,
    /// The remembered operation ids (`None`: the backend lists none).
    ops: Option<Vec<Op>>,
    /// `None`: the backend has no leases; `Some(None)`: no live lease.
    lease: Option<Option<LeaseHolder>>,
    /// Backend-specific facts (objects: nonce, content type, metadata).
    extra: Value,
}

impl Inspection {
    /// An object no fenced write or claim has reached: no mark, no operation ids.
    fn unseen_object(
        backend: &'static str,
        domain: Domain,
        key: String,
        snapshot: fence_core::Snapshot,
    ) -> Self {
        Inspection {
            backend,
            domain,
            location: Some(key),
            snapshot,
            ops: Some(Vec::new()),
            lease: None,
            extra: Value::Null,
        }
    }
}

pub(crate) async fn run(targets: &Targets, backend: Backend, domain: &str) -> Report {
    match inspect(targets, backend, domain).await {
        Ok(inspection) => inspection.report(),
        Err(report) => report,
    }
}

async fn inspect(targets: &Targets, backend: Backend, domain: &str) -> Result<Inspection, Report> {
    let domain = Domain::new(domain).map_err(|e| Report::failed(&e.into()))?;
    match backend {
        // Their op ids live in formats of their own, decoded here.
        Backend::S3 => s3(targets, domain).await,
        Backend::ObjectStore => object_store(targets, domain).await,
        Backend::Kafka => kafka(targets, domain).await,
        _ => generic(&*targets.open(backend).await?, domain).await,
    }
}

/// The domain's committed fence-ledger record: a log has a mark and op ids, no entry.
async fn kafka(targets: &Targets, domain: Domain) -> Result<Inspection, Report> {
    let fence = targets.kafka()?;
    let record = fence
        .committed_ledger(&domain)
        .await
        .map_err(|e| Report::failed(&e))?;
    let ops = ops_of(&record.ops);
    Ok(Inspection {
        backend: "kafka",
        location: Some(format!(
            "transactional id `{}`",
            fence.transactional_id(&domain)
        )),
        domain,
        snapshot: fence_core::Snapshot::new(record.high_water_mark, Entry::Absent),
        ops: Some(ops),
        lease: None,
        extra: Value::Null,
    })
}

/// Through the fence's own read, the remembered op ids and the lease backend's `holder`.
async fn generic(target: &dyn Target, domain: Domain) -> Result<Inspection, Report> {
    let failed = |e: FenceError| Report::failed(&e);
    let store = target.store().ok_or_else(|| {
        Report::usage(format!(
            "{} keeps no entry to inspect",
            target.fence().backend()
        ))
    })?;
    let snapshot = store.read(&domain).await.map_err(failed)?;
    let ops = match target.remembered_ops(&domain).await {
        Some(ops) => Some(listed(ops.map_err(failed)?)),
        None => None,
    };
    let lease = match target.leases() {
        Some(leases) => Some(leases.holder(&domain).await.map_err(failed)?),
        None => None,
    };
    Ok(Inspection {
        backend: target.fence().backend(),
        domain,
        location: None,
        snapshot,
        ops,
        lease,
        extra: Value::Null,
    })
}

/// The raw object, decoded with the public envelope decoder: everything the envelope holds.
async fn s3(targets: &Targets, domain: Domain) -> Result<Inspection, Report> {
    let fence = targets.s3().await?;
    let key = fence.object_key(&domain).map_err(|e| Report::failed(&e))?;
    // The fence's own read classifies every failure (a missing bucket, foreign bytes...);
    // the raw object then shows what the envelope holds beyond the snapshot.
    let snapshot = fence.read(&domain).await.map_err(|e| Report::failed(&e))?;
    if snapshot.high_water_mark.is_none() {
        return Ok(Inspection::unseen_object("s3", domain, key, snapshot));
    }
    let unavailable = |domain: &Domain, e: Box<dyn std::error::Error + Send + Sync>| {
        Report::failed(&FenceError::backend(
            "s3",
            fence_core::BackendErrorKind::Unavailable,
            Some(domain),
            e,
        ))
    };
    let client = targets.s3_client().await?;
    let object = client
        .get_object()
        .bucket(fence.bucket())
        .key(&key)
        .send()
        .await
        .map_err(|e| unavailable(&domain, e.into()))?;
    let content_type = object.content_type().map(str::to_owned);
    let metadata = object.metadata().cloned().unwrap_or_default();
    let bytes = object
        .body
        .collect()
        .await
        .map_err(|e| unavailable(&domain, e.into()))?
        .into_bytes();
    let attributes = json!({ "content_type": content_type, "metadata": metadata });
    envelope_inspection("s3", domain, key, &bytes, attributes)
}

/// Through object_store: the fence's own read, then the raw object and its attributes.
async fn object_store(targets: &Targets, domain: Domain) -> Result<Inspection, Report> {
    use fence_object_store::object_store::{path::Path, Attribute, ObjectStoreExt};
    let fence = targets.object_store()?;
    let failed = |e: FenceError| Report::failed(&e);
    let key = fence.object_key(&domain).map_err(failed)?;
    let snapshot = fence.read(&domain).await.map_err(failed)?;
    if snapshot.high_water_mark.is_none() {
        return Ok(Inspection::unseen_object(
            "object_store",
            domain,
            key,
            snapshot,
        ));
    }
    // Classified as the library classifies it (a concurrent retire: not found; a revoked
    // credential: denied; a lost connection: unavailable).
    let failed_read = |domain: &Domain, e: fence_object_store::object_store::Error| {
        let error = fence_object_store::ObjectStoreFenceError::Store(e);
        Report::failed(&FenceError::backend(
            "object_store",
            error.kind(),
            Some(domain),
            error,
        ))
    };
    let path = Path::parse(&key).map_err(|e| Report::usage(e.to_string()))?;
    // The adapter's store, not the command's `Target::store` (which is the fence).
    let object = fence_object_store::ObjectStoreFence::store(&fence)
        .get(&path)
        .await
        .map_err(|e| failed_read(&domain, e))?;
    let mut metadata = serde_json::Map::new();
    let mut content_type = None;
    for (attribute, value) in object.attributes.iter() {
        match attribute {
            Attribute::ContentType => content_type = Some(value.as_ref().to_owned()),
            Attribute::Metadata(name) => {
                metadata.insert(name.to_string(), value.as_ref().to_owned().into());
            }
            _ => {}
        }
    }
    let bytes = object.bytes().await.map_err(|e| failed_read(&domain, e))?;
    let attributes = json!({ "content_type": content_type, "metadata": metadata });
    envelope_inspection("object_store", domain, key, &bytes, attributes)
}

/// Everything a fenced object's envelope holds, decoded with the public decoder, beside the
/// object's `attributes` (content type, metadata).
fn envelope_inspection(
    backend: &'static str,
    domain: Domain,
    key: String,
    bytes: &bytes::Bytes,
    mut attributes: Value,
) -> Result<Inspection, Report> {
    let envelope = Envelope::decode(bytes).map_err(|why| {
        Report::failed(&FenceError::corrupt(
            backend,
            &domain,
            format!("object `{key}`: {why}"),
        ))
    })?;
    let payload = bytes.slice(envelope.payload_offset()..);
    let entry = match envelope.entry() {
        None => Entry::Absent,
        Some(fence_core::raw::EntryHead::Value { token, revision }) => Entry::Value {
            value: payload,
            token,
            revision,
        },
        Some(fence_core::raw::EntryHead::Tombstone { token, revision }) => {
            Entry::Tombstone { token, revision }
        }
    };
    attributes["nonce"] = format!("{:016x}", envelope.nonce()).into();
    Ok(Inspection {
        backend,
        domain,
        location: Some(key),
        snapshot: fence_core::Snapshot::new(Some(envelope.high_water_mark()), entry),
        ops: Some(ops_of(envelope.ops())),
        lease: None,
        extra: attributes,
    })
}

/// The operation ids an envelope or ledger record remembers.
fn ops_of(ops: &fence_core::raw::OpMemory) -> Vec<Op> {
    listed(ops.iter().map(RememberedOp::from).collect())
}

/// Remembered operations as the report lists them.
fn listed(ops: Vec<RememberedOp>) -> Vec<Op> {
    ops.into_iter()
        .map(|op| Op {
            token: op.token.to_string(),
            op_id: op.op_id.as_str().to_owned(),
            kind: op.kind.as_str().to_owned(),
            previous: token_json(op.previous),
            outcome: op.outcome,
        })
        .collect()
}

impl Inspection {
    fn report(self) -> Report {
        let snapshot = &self.snapshot;
        let entry = entry_json(&snapshot.entry);
        let ops = self.ops.as_ref().map(|ops| {
            ops.iter()
                .map(|op| {
                    json!({
                        "token": op.token, "op_id": op.op_id, "kind": op.kind,
                        "previous": op.previous, "outcome": op.outcome,
                    })
                })
                .collect::<Vec<_>>()
        });
        // `null`: the backend has no leases; `"free"`: no live lease; else the holder.
        let lease = self.lease.as_ref().map(|holder| match holder {
            None => Value::from("free"),
            Some(h) => json!({
                "owner": h.owner.as_str(),
                "token": h.token.to_string(),
                "remaining_ms": h.remaining.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX)),
            }),
        });
        let json = json!({
            "backend": self.backend,
            "domain": self.domain.as_str(),
            "location": self.location,
            "mark": token_json(snapshot.high_water_mark),
            "entry": entry,
            "ops": ops,
            "lease": lease,
            "details": self.extra,
        });
        let text = self.text();
        let unknown = snapshot.high_water_mark.is_none()
            && matches!(snapshot.entry, Entry::Absent)
            && !matches!(self.lease, Some(Some(_)));
        if unknown {
            Report::not_found(json, text)
        } else {
            Report::done(json, text)
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let location = self
            .location
            .as_ref()
            .map_or(String::new(), |l| format!(" at `{l}`"));
        let _ = writeln!(out, "domain  {} ({}{location})", self.domain, self.backend);
        let mark = self
            .snapshot
            .high_water_mark
            .map_or("none (no token accepted yet)".to_owned(), |m| m.to_string());
        let _ = writeln!(out, "mark    {mark}");
        let entry = entry_text(&self.snapshot.entry);
        let _ = writeln!(out, "entry   {entry}");
        match &self.ops {
            None => {
                let _ = writeln!(out, "ops     not listed for {}", self.backend);
            }
            Some(ops) if ops.is_empty() => {
                let _ = writeln!(out, "ops     none remembered");
            }
            Some(ops) => {
                for (i, op) in ops.iter().enumerate() {
                    let label = if i == 0 { "ops" } else { "" };
                    let previous = op.previous.as_str().unwrap_or("none");
                    let _ = writeln!(
                        out,
                        "{label:<7} token {} op {:?}: {} -> {} (mark before: {previous})",
                        op.token, op.op_id, op.kind, op.outcome
                    );
                }
            }
        }
        match &self.lease {
            None => {}
            Some(None) => {
                let _ = writeln!(out, "lease   free");
            }
            Some(Some(holder)) => {
                let remaining = holder.remaining.map_or(String::new(), |r| {
                    format!(", {:.1} s left", r.as_secs_f64())
                });
                let _ = writeln!(
                    out,
                    "lease   held by {:?} with token {}{remaining}",
                    holder.owner.as_str(),
                    holder.token
                );
            }
        }
        if let Some(content_type) = self.extra.get("content_type").and_then(Value::as_str) {
            let _ = writeln!(out, "type    {content_type}");
        }
        out.trim_end().to_owned()
    }
}
