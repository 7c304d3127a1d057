//! `fence decode <format>`: a record Fence wrote at a resource, decoded by the same strict
//! decoder the library reads it with, from standard input, a file or (S3) an object.

use std::fmt::Write as _;
use std::path::Path;

use fence_core::{EntryHead, OpMemory, OpOutcome};
use fence_kafka::{CommittedRecord, LedgerRecord, DOMAIN_HEADER, OP_HEADER, TOKEN_HEADER};
use fence_outbox_redis::PackedRecord;
use fence_s3::{Envelope, Manifest};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use crate::report::{bytes_json, token_json, Exit, Report};
use crate::targets::Targets;
use crate::Format;

pub(crate) async fn run(
    targets: &Targets,
    format: Format,
    file: Option<&Path>,
    object: Option<&str>,
) -> Report {
    let bytes = match read(targets, file, object).await {
        Ok(bytes) => bytes,
        Err(report) => return report,
    };
    let decoded = match format {
        Format::S3Envelope => s3_envelope(&bytes),
        Format::Manifest => Manifest::parse(&bytes)
            .map(|manifest| manifest_report(&manifest))
            .map_err(|e| e.to_string()),
        Format::KafkaLedger => LedgerRecord::decode(&bytes)
            .map(|record| ledger_report(&record))
            .map_err(|e| e.to_string()),
        Format::KafkaHeaders => kafka_headers(&bytes),
        Format::RedisOutboxEntry => PackedRecord::decode(&bytes)
            .map(|record| outbox_entry_report(&record))
            .map_err(|e| e.to_string()),
    };
    decoded.unwrap_or_else(corrupt)
}

/// Bytes that do not decode: the corrupt-state exit code, with the decoder's reason.
fn corrupt(reason: String) -> Report {
    Report::usage(reason).with_exit(Exit::Corrupt, "corrupt")
}

async fn read(
    targets: &Targets,
    file: Option<&Path>,
    object: Option<&str>,
) -> Result<Vec<u8>, Report> {
    if let Some(key) = object {
        let client = targets.s3_client()?;
        let output = client
            .get_object()
            .bucket(targets.s3_bucket()?)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                let missing = e.as_service_error().is_some_and(|s| s.is_no_such_key());
                if missing {
                    Report::usage(format!("no object `{key}` in the bucket"))
                        .with_exit(Exit::NotFound, "not_found")
                } else {
                    Report::usage(format!("reading object `{key}`: {e}"))
                        .with_exit(Exit::Unavailable, "unavailable")
                }
            })?;
        let bytes = output.body.collect().await.map_err(|e| {
            Report::usage(format!("reading object `{key}`: {e}"))
                .with_exit(Exit::Unavailable, "unavailable")
        })?;
        return Ok(bytes.into_bytes().to_vec());
    }
    let mut bytes = Vec::new();
    let read = match file {
        Some(path) => tokio::fs::read(path).await.map(|b| bytes = b),
        None => tokio::io::stdin().read_to_end(&mut bytes).await.map(|_| ()),
    };
    read.map_err(|e| Report::usage(format!("reading the input: {e}")))?;
    Ok(bytes)
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
        _ => json!({ "state": "none" }),
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
            .map_or("none".to_owned(), |e| e.to_string()),
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
        "ops": ops_json(&record.ops),
    });
    let mut text = format!(
        "format  FENCE-KAFKA/1\nmark    {}\n",
        record
            .high_water_mark
            .map_or("none".to_owned(), |t| t.to_string())
    );
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
