//! Parsing the outbox scripts' `{tag, field, ...}` replies.

use fence_core::{Domain, FenceError, FencingToken};
use fence_redis::redis::Value;

use crate::codec::unpack;
use fence_outbox::IdempotencyKey;
use fence_outbox::{EntryStatus, OutboxEntry};

pub(crate) struct Reply {
    pub(crate) tag: String,
    pub(crate) fields: Vec<Value>,
}

pub(crate) fn parse(domain: &Domain, value: Value) -> Result<Reply, FenceError> {
    let Value::Array(mut items) = value else {
        return Err(corrupt(
            domain,
            format!("script reply is not an array: {value:?}"),
        ));
    };
    if items.is_empty() {
        return Err(corrupt(domain, "empty script reply"));
    }
    let tag = text(domain, &items.remove(0))?;
    let reply = Reply { tag, fields: items };
    match reply.tag.as_str() {
        "corrupt" => Err(corrupt(domain, reply.text(domain, 0).unwrap_or_default())),
        "fenced" => Err(fenced_relay(domain, &reply)),
        _ => Ok(reply),
    }
}

/// A relay mark refusal: the relay's token is below the domain's relay mark.
fn fenced_relay(domain: &Domain, reply: &Reply) -> FenceError {
    match reply
        .text(domain, 0)
        .ok()
        .and_then(|t| t.parse::<FencingToken>().ok())
    {
        Some(current) => FenceError::Fenced {
            domain: domain.clone(),
            presented: current, // replaced by the caller, who knows the presented token
            current,
        },
        None => corrupt(domain, "fenced reply without a mark"),
    }
}

/// Sets the presented token on a relay refusal.
pub(crate) fn with_presented(error: FenceError, presented: FencingToken) -> FenceError {
    match error {
        FenceError::Fenced {
            domain, current, ..
        } => FenceError::Fenced {
            domain,
            presented,
            current,
        },
        other => other,
    }
}

/// The backend name the outbox's errors carry.
pub(crate) const BACKEND: &str = "redis";

/// A corrupt-state error of `domain`.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, detail)
}

fn text(domain: &Domain, value: &Value) -> Result<String, FenceError> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone())
            .map_err(|_| corrupt(domain, "reply field is not UTF-8")),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(corrupt(domain, format!("unexpected reply field {other:?}"))),
    }
}

impl Reply {
    pub(crate) fn text(&self, domain: &Domain, index: usize) -> Result<String, FenceError> {
        match self.fields.get(index) {
            Some(value) => text(domain, value),
            None => Err(corrupt(domain, format!("reply has no field {index}"))),
        }
    }

    pub(crate) fn number(&self, domain: &Domain, index: usize) -> Result<u64, FenceError> {
        let text = self.text(domain, index)?;
        text.parse()
            .map_err(|_| corrupt(domain, format!("`{text}` is not a number")))
    }

    fn bytes(&self, domain: &Domain, index: usize) -> Result<&[u8], FenceError> {
        match self.fields.get(index) {
            Some(Value::BulkString(bytes)) => Ok(bytes),
            other => Err(corrupt(domain, format!("reply field {index} is {other:?}"))),
        }
    }

    /// Entries laid out as `seq, record, status, attempts, last error, settled ms`.
    pub(crate) fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, FenceError> {
        const WIDTH: usize = 6;
        if !self.fields.len().is_multiple_of(WIDTH) {
            return Err(corrupt(domain, "entry reply is truncated"));
        }
        (0..self.fields.len() / WIDTH)
            .map(|n| self.entry(domain, n * WIDTH))
            .collect()
    }

    fn entry(&self, domain: &Domain, at: usize) -> Result<OutboxEntry, FenceError> {
        let seq = self.number(domain, at)?;
        let bad = |what: &str| corrupt(domain, format!("entry {seq}: {what}"));
        let record = unpack(self.bytes(domain, at + 1)?).map_err(bad)?;
        let token = record
            .token
            .parse::<FencingToken>()
            .map_err(|_| bad("bad token"))?;
        let attempts_text = self.text(domain, at + 3)?;
        let attempts: u32 = if attempts_text.is_empty() {
            0
        } else {
            attempts_text
                .parse()
                .map_err(|_| bad("bad attempt count"))?
        };
        let error = self.text(domain, at + 4)?;
        let settled = self.text(domain, at + 5)?.parse::<u64>().ok();
        let status = match (self.text(domain, at + 2)?.as_str(), settled) {
            ("", _) => EntryStatus::Pending {
                attempts,
                last_error: (!error.is_empty()).then_some(error),
            },
            ("d", Some(at_ms)) => EntryStatus::Delivered { attempts, at_ms },
            ("x", Some(at_ms)) => EntryStatus::DeadLettered {
                attempts,
                at_ms,
                last_error: error,
            },
            _ => return Err(bad("unknown status or no settle time")),
        };
        Ok(OutboxEntry::new(
            domain.clone(),
            seq,
            IdempotencyKey::from_recorded(record.key),
            fence_outbox::Effect::new(record.kind, record.destination, record.payload),
            token,
            record.recorded_at_ms,
            status,
        ))
    }
}
