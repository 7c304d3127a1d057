//! `fence decode <format>`: a record Fence wrote at a resource, decoded by the same strict
//! decoder the library reads it with, from standard input, a file or (S3) an object.

use std::fmt::Write as _;
use std::path::Path;

use fence_core::{EntryHead, OpMemory, OpOutcome};
use fence_kafka::LedgerRecord;
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
