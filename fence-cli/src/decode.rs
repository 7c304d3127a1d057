//! `fence decode <format>`: a record Fence wrote at a resource, decoded by the same strict
//! decoder the library reads it with, from standard input, a file, an object (S3, or any store
//! through object_store) or a Redis key.

use std::fmt::Write as _;
use std::path::Path;

use fence_core::raw::{EntryHead, OpMemory};
use fence_core::{OpOutcome, Snapshot};
use fence_kafka::{CommittedRecord, LedgerRecord, DOMAIN_HEADER, OP_HEADER, TOKEN_HEADER};
use fence_outbox_kafka::Progress;
use fence_outbox_redis::PackedRecord;
use fence_s3::{Envelope, Manifest};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use crate::report::{bytes_json, entry_json, entry_text, token_json, Exit, Report};
use crate::targets::Targets;
use crate::Format;

/// An object to read the record from, by key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Object<'a> {
    /// In the configured S3 bucket (`FENCE_S3_*`).
    S3(&'a str),
    /// Through the configured object_store URL (`FENCE_OBJECT_STORE_URL`).
    ObjectStore(&'a str),
}

/// Where the record comes from (standard input when nothing is named).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source<'a> {
    file: Option<&'a Path>,
    object: Option<Object<'a>>,
    key: Option<&'a str>,
}

impl<'a> Source<'a> {
    pub(crate) fn new(
        file: Option<&'a Path>,
        object: Option<Object<'a>>,
        key: Option<&'a str>,
    ) -> Self {
        Source { file, object, key }
    }
}

pub(crate) async fn run(targets: &Targets, format: Format, source: Source<'_>) -> Report {
    if source.object.is_some() && format == Format::RedisState {
        return Report::usage("redis-state is read from --key, a file or standard input");
    }
    if source.key.is_some() && format != Format::RedisState {
        return Report::usage("--key reads a Redis state key: it goes with redis-state");
    }
    let decode: fn(&[u8]) -> Result<Report, String> = match format {
        Format::RedisState => {
            return redis_state(targets, source)
                .await
                .unwrap_or_else(|report| report)
        }
        Format::S3Envelope => s3_envelope,
        Format::Manifest => |bytes| {
            Manifest::parse(bytes)
                .map(|manifest| manifest_report(&manifest))
                .map_err(|e| e.to_string())
        },
        Format::KafkaLedger => |bytes| {
            LedgerRecord::decode(bytes)
                .map(|record| ledger_report(&record))
                .map_err(|e| e.to_string())
        },
        Format::KafkaHeaders => kafka_headers,
        Format::RedisOutboxEntry => |bytes| {
            PackedRecord::decode(bytes)
                .map(|record| outbox_entry_report(&record))
                .map_err(|e| e.to_string())
        },
        Format::KafkaOutboxProgress => |bytes| {
            Progress::decode(bytes)
                .map(|progress| progress_report(&progress))
                .map_err(|e| e.to_string())
        },
    };
    match read(targets, source).await {
        Ok(bytes) => decode(&bytes).unwrap_or_else(corrupt),
        Err(report) => report,
    }
}

/// Bytes that do not decode: the corrupt-state exit code, with the decoder's reason.
fn corrupt(reason: String) -> Report {
    Report::usage(reason).with_exit(Exit::Corrupt, "corrupt")
}

async fn read(targets: &Targets, source: Source<'_>) -> Result<Vec<u8>, Report> {
    if let Some(Object::ObjectStore(key)) = source.object {
        return read_through_object_store(targets, key).await;
    }
    if let Some(Object::S3(key)) = source.object {
        let client = targets.s3_client().await?;
        let output = client
            .get_object()
            .bucket(targets.s3_bucket()?)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                let missing = e.as_service_error().is_some_and(|s| s.is_no_such_key());
                let status = e.raw_response().map(|r| r.status().as_u16());
                let report = Report::usage(format!("reading object `{key}`: {e}"));
                match status {
                    _ if missing => Report::usage(format!("no object `{key}` in the bucket"))
                        .with_exit(Exit::NotFound, "not_found"),
                    // Refused (credentials, policy, a bad request): retrying will not help.
                    Some(400..=499) if status != Some(429) => {
                        report.with_exit(Exit::Failed, "failed")
                    }
                    _ => report.with_exit(Exit::Unavailable, "unavailable"),
                }
            })?;
        let bytes = output.body.collect().await.map_err(|e| {
            Report::usage(format!("reading object `{key}`: {e}"))
                .with_exit(Exit::Unavailable, "unavailable")
        })?;
        return Ok(bytes.into_bytes().to_vec());
    }
    let mut bytes = Vec::new();
    let read = match source.file {
        Some(path) => tokio::fs::read(path).await.map(|b| bytes = b),
        None => tokio::io::stdin().read_to_end(&mut bytes).await.map(|_| ()),
    };
    read.map_err(|e| {
        let report = Report::usage(format!("reading the input: {e}"));
        if e.kind() == std::io::ErrorKind::NotFound {
            report.with_exit(Exit::NotFound, "not_found")
        } else {
            report
        }
    })?;
    Ok(bytes)
}

/// The object at `key` through the configured object_store URL, whole.
async fn read_through_object_store(targets: &Targets, key: &str) -> Result<Vec<u8>, Report> {
    use fence_core::BackendErrorKind;
    use fence_object_store::object_store::{path::Path, Error, ObjectStoreExt};
    use fence_object_store::ObjectStoreFenceError;
    let fence = targets.object_store()?;
    let path = Path::parse(key)
        .map_err(|e| Report::usage(format!("`{key}` is not an object_store path: {e}")))?;
    // Classified as the library classifies it.
    let failed = |e: Error| {
        let report = Report::usage(format!("reading object `{key}`: {e}"));
        match ObjectStoreFenceError::Store(e).kind() {
            BackendErrorKind::NotFound => Report::usage(format!("no object `{key}` in the store"))
                .with_exit(Exit::NotFound, "not_found"),
            BackendErrorKind::Unavailable => report.with_exit(Exit::Unavailable, "unavailable"),
            _ => report.with_exit(Exit::Failed, "failed"),
        }
    };
    let object = fence.store().get(&path).await.map_err(failed)?;
    let bytes = object.bytes().await.map_err(failed)?;
    Ok(bytes.to_vec())
}

/// A state hash from a live key (`HGETALL`, binary-safe) or from text: an optional `key K`
/// line, then one `field value` per line (FORMATS.md §3.2's example form).
async fn redis_state(targets: &Targets, source: Source<'_>) -> Result<Report, Report> {
    let (key, fields) = match source.key {
        Some(key) => {
            let fence = targets.redis().await?;
            let domain = fence.domain_of_key(key).ok_or_else(|| {
                Report::usage(format!(
                    "`{key}` is not a key of a domain under the prefix `{}` (`<prefix>:{{<escaped domain>}}:state`)",
                    fence.prefix()
                ))
            })?;
            if fence.state_key(&domain) != key {
                return Err(Report::usage(format!(
                    "`{key}` is not a state key (`…:state`); inspect the domain `{domain}` instead"
                )));
            }
            let fields = fence
                .state_fields(&domain)
                .await
                .map_err(|e| Report::failed(&e))?;
            if fields.is_empty() {
                return Err(
                    Report::usage(format!("no key `{key}`")).with_exit(Exit::NotFound, "not_found")
                );
            }
            (Some(key.to_owned()), fields)
        }
        None => {
            let bytes = read(targets, source).await?;
            state_text(&bytes).map_err(corrupt)?
        }
    };
    let snapshot = fence_redis::decode_state(&fields).map_err(|e| corrupt(e.to_string()))?;
    Ok(state_report(key.as_deref(), &snapshot, &fields))
}

/// A state hash's fields, as `HGETALL` answers them.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn state_text(bytes: &[u8]) -> Result<(Option<String>, Fields), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "state text is not UTF-8".to_owned())?;
    let mut lines = text.lines().filter(|l| !l.is_empty()).peekable();
    let key = lines
        .peek()
        .and_then(|l| l.strip_prefix("key "))
        .map(str::to_owned);
    if key.is_some() {
        lines.next();
    }
    let fields: Vec<_> = lines
        .map(|line| {
            let (field, value) = line.split_once(' ').unwrap_or((line, ""));
            (field.as_bytes().to_vec(), value.as_bytes().to_vec())
        })
        .collect();
    if fields.is_empty() {
        return Err("no fields: one `field value` per line".to_owned());
    }
    Ok((key, fields))
}

fn state_report(key: Option<&str>, snapshot: &Snapshot, fields: &[(Vec<u8>, Vec<u8>)]) -> Report {
    let ignored: Vec<String> = fields
        .iter()
        .filter(|(name, _)| {
            !fence_redis::STATE_FIELDS
                .iter()
                .any(|f| f.as_bytes() == name)
        })
        .map(|(name, _)| String::from_utf8_lossy(name).into_owned())
        .collect();
    let json = json!({
        "format": "redis-state",
        "key": key,
        "mark": token_json(snapshot.high_water_mark),
        "entry": entry_json(&snapshot.entry),
        "ignored_fields": ignored,
    });
    let mut text = String::new();
    if let Some(key) = key {
        let _ = writeln!(text, "key     {key}");
    }
    let _ = write!(
        text,
        "mark    {}\nentry   {}",
        snapshot
            .high_water_mark
            .map_or("none".to_owned(), |t| t.to_string()),
        entry_text(&snapshot.entry)
    );
    if !ignored.is_empty() {
        let _ = write!(text, "\nignored {}", ignored.join(" "));
    }
    Report::done(json, text)
}

fn ops_json(ops: &OpMemory) -> Vec<Value> {
    ops.iter()
        .map(|op| {
            let outcome = match op.outcome {
                OpOutcome::Write { revision } => json!({ "revision": revision.get() }),
                OpOutcome::Append { records } => json!({ "records": records }),
                _ => Value::Null,
            };
            json!({
                "token": op.token.to_string(),
                "op_id": op.op_id.as_str(),
                "kind": op.outcome.kind().as_str(),
                "previous": token_json(op.previous),
                "outcome": outcome,
            })
        })
        .collect()
}

fn ops_text(out: &mut String, ops: &OpMemory) {
    for op in ops.iter() {
        let _ = writeln!(out, "op      {}", op.to_line());
    }
}

fn s3_envelope(bytes: &[u8]) -> Result<Report, String> {
    let envelope = Envelope::decode(bytes).map_err(|e| e.to_string())?;
    let payload = &bytes[envelope.payload_offset()..];
    let entry = match envelope.entry() {
        Some(EntryHead::Value { token, revision }) => {
            json!({ "state": "value", "token": token.to_string(), "revision": revision.get() })
        }
        Some(EntryHead::Tombstone { token, revision }) => {
            json!({ "state": "tombstone", "token": token.to_string(), "revision": revision.get() })
        }
        _ => json!({ "state": "absent" }),
    };
    let json = json!({
        "format": "FENCE-S3/1",
        "mark": envelope.high_water_mark().to_string(),
        "entry": entry,
        "nonce": format!("{:016x}", envelope.nonce()),
        "ops": ops_json(envelope.ops()),
        "payload_offset": envelope.payload_offset(),
        "payload": bytes_json(payload),
    });
    let mut text = format!(
        "format  FENCE-S3/1\nmark    {}\nentry   {}\nnonce   {:016x}\n",
        envelope.high_water_mark(),
        envelope
            .entry()
            .map_or("absent".to_owned(), |e| e.to_string()),
        envelope.nonce()
    );
    ops_text(&mut text, envelope.ops());
    let _ = write!(
        text,
        "payload {} bytes at offset {}",
        payload.len(),
        envelope.payload_offset()
    );
    Ok(Report::done(json, text))
}

fn manifest_report(manifest: &Manifest) -> Report {
    let json = json!({ "format": "FENCE-MANIFEST/1", "keys": manifest.keys() });
    let mut text = String::from("format  FENCE-MANIFEST/1");
    for key in manifest.keys() {
        let _ = write!(text, "\nkey     {key}");
    }
    Report::done(json, text)
}

fn ledger_report(record: &LedgerRecord) -> Report {
    let json = json!({
        "format": "FENCE-KAFKA/1",
        "mark": token_json(record.high_water_mark),
        "next_seq": record.next_seq.map(|n| n.to_string()),
        "ops": ops_json(&record.ops),
    });
    let mut text = format!(
        "format  FENCE-KAFKA/1\nmark    {}\n",
        record
            .high_water_mark
            .map_or("none".to_owned(), |t| t.to_string())
    );
    if let Some(seq) = record.next_seq {
        text.push_str(&format!(
            "seq     the domain's next record is number {seq} (record-key partitioning)\n"
        ));
    }
    ops_text(&mut text, &record.ops);
    Report::done(json, text.trim_end().to_owned())
}

/// Headers as `name=value` lines, decoded by fence-kafka's own reader of committed records.
fn kafka_headers(bytes: &[u8]) -> Result<Report, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "headers are not UTF-8 text".to_owned())?;
    let mut record = CommittedRecord::new("stdin", 0, 0, Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| format!("header line `{line}` is not name=value"))?;
        record = record.with_header(name, value.as_bytes().to_vec());
    }
    let Some(headers) = record.fence_headers() else {
        return Ok(Report::done(
            json!({ "fenced": false }),
            format!("not a fenced record: no `{DOMAIN_HEADER}` header"),
        ));
    };
    // FORMATS.md §4.2: a fenced record's token must be valid, and an op id header too.
    let token = headers
        .token
        .ok_or_else(|| format!("`{TOKEN_HEADER}` is missing or not a canonical token"))?;
    if record.header(OP_HEADER).is_some() && headers.op_id.is_none() {
        return Err(format!("`{OP_HEADER}` is not a valid operation id"));
    }
    let op_id = headers.op_id.as_ref().map(|op| op.as_str().to_owned());
    let text = format!(
        "domain  {}\ntoken   {token}\nop      {}",
        headers.domain,
        op_id.as_deref().unwrap_or("none")
    );
    Ok(Report::done(
        json!({ "fenced": true, "domain": headers.domain, "token": token.to_string(), "op_id": op_id }),
        text,
    ))
}

fn outbox_entry_report(record: &PackedRecord) -> Report {
    let json = json!({
        "recorded_at_ms": record.recorded_at_ms,
        "token": record.token,
        "key": record.key,
        "kind": record.kind,
        "destination": record.destination,
        "payload": bytes_json(&record.payload),
    });
    let text = format!(
        "recorded {} ms\ntoken    {}\nkey      {}\nkind     {}\nto       {}\npayload  {} bytes",
        record.recorded_at_ms,
        record.token,
        record.key,
        record.kind,
        record.destination,
        record.payload.len()
    );
    Report::done(json, text)
}

fn progress_report(progress: &Progress) -> Report {
    let (json, text) = match progress {
        Progress::Begin {
            domain,
            seq,
            attempt,
        } => (
            json!({ "format": "FENCE-OUTBOX-PROGRESS/1", "kind": "begin", "domain": domain.as_str(), "seq": seq, "attempt": attempt }),
            format!("begin   entry {seq} of `{domain}`, attempt {attempt}"),
        ),
        Progress::Settle {
            domain,
            seq,
            outcome,
            at_ms,
            error,
        } => {
            let outcome = match outcome {
                'd' => "delivered",
                'x' => "dead_letter",
                _ => "retry",
            };
            (
                json!({ "format": "FENCE-OUTBOX-PROGRESS/1", "kind": "settle", "domain": domain.as_str(), "seq": seq, "outcome": outcome, "at_ms": at_ms, "error": error }),
                format!(
                    "settle  entry {seq} of `{domain}`: {outcome} at {at_ms} ms{}",
                    if error.is_empty() {
                        String::new()
                    } else {
                        format!(" ({error})")
                    }
                ),
            )
        }
        _ => (
            json!({ "format": "FENCE-OUTBOX-PROGRESS/1", "kind": "unknown" }),
            "a progress record of a kind this tool does not know".to_owned(),
        ),
    };
    Report::done(json, text)
}
