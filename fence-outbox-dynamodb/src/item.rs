//! The outbox table's items: a domain's progress item and its entries, encoded and decoded
//! failing closed on anything the outbox did not write.
//!
//! ```text
//! <namespace>/<escaped domain>          the domain's progress
//!   dom   S  the domain            part  N  its partition
//!   last  N  entries 1..=last recorded        done  N  1..=done settled
//!   kept  N  entries below it gone or dead    ver   N  raised by every transition
//!   relay N  the newest relay token seen      pend  N  the partition, while entries are pending
//!   dls   NS the dead letters (until discarded or re-driven)
//! <namespace>/<escaped domain>#<seq>     one entry
//!   seq N, ikey S (idempotency key), op S (op id), kind S, dest S, pay B, tok N (token),
//!   at N (recorded, ms), st S (`p` pending, `d` delivered, `x` dead letter), att N (attempts),
//!   err S (last error), sat N (settled, ms), sby N (the relay token that settled it)
//! ```

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use fence_core::{Domain, FenceError, FencingToken};
use fence_dynamodb::aws_sdk_dynamodb::primitives::Blob;
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
pub(crate) use fence_dynamodb::extension::text;
use fence_dynamodb::extension::{count_of, number, Item, BACKEND};
use fence_outbox::{Effect, EntryStatus, IdempotencyKey, OutboxEntry};

/// Attribute names (sent through expression attribute names: several are reserved words).
pub(crate) mod attr {
    pub(crate) const PK: &str = "pk";
    pub(crate) const DOMAIN: &str = "dom";
    pub(crate) const PART: &str = "part";
    pub(crate) const LAST: &str = "last";
    pub(crate) const DONE: &str = "done";
    pub(crate) const KEPT: &str = "kept";
    pub(crate) const VER: &str = "ver";
    pub(crate) const RELAY: &str = "relay";
    pub(crate) const PENDING: &str = "pend";
    pub(crate) const DEAD: &str = "dls";
    pub(crate) const SEQ: &str = "seq";
    pub(crate) const KEY: &str = "ikey";
    pub(crate) const OP: &str = "op";
    pub(crate) const KIND: &str = "kind";
    pub(crate) const DEST: &str = "dest";
    pub(crate) const PAYLOAD: &str = "pay";
    pub(crate) const TOKEN: &str = "tok";
    pub(crate) const AT: &str = "at";
    pub(crate) const STATUS: &str = "st";
    pub(crate) const ATTEMPTS: &str = "att";
    pub(crate) const ERROR: &str = "err";
    pub(crate) const SETTLED_AT: &str = "sat";
    pub(crate) const SETTLED_BY: &str = "sby";
}

/// The sparse index of domains with pending entries, by partition (`pend`).
pub(crate) const PENDING_INDEX: &str = "pending";

/// Now, in ms since the Unix epoch, by this machine's clock (DynamoDB has none to offer).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The corrupt-state error about `domain`'s outbox.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, format!("outbox: {}", detail.into()))
}

/// A domain's progress item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    pub(crate) part: u16,
    pub(crate) last: u64,
    pub(crate) done: u64,
    pub(crate) kept: u64,
    pub(crate) ver: u64,
    pub(crate) relay: Option<FencingToken>,
    pub(crate) dead: BTreeSet<u64>,
}

impl Progress {
    /// The progress `item` holds (`None`: no transition recorded yet).
    pub(crate) fn decode(domain: &Domain, item: Option<&Item>) -> Result<Option<Self>, FenceError> {
        let Some(item) = item else {
            return Ok(None);
        };
        let count = |name: &str| {
            count_of(item.get(name))
                .ok_or_else(|| corrupt(domain, format!("progress attribute `{name}`")))
        };
        let part = u16::try_from(count(attr::PART)?)
            .map_err(|_| corrupt(domain, "a partition above 65535"))?;
        let relay = match item.get(attr::RELAY) {
            None => None,
            Some(_) => Some(
                FencingToken::new(count(attr::RELAY)?)
                    .map_err(|_| corrupt(domain, "relay token 0"))?,
            ),
        };
        match item.get(attr::DOMAIN) {
            Some(AttributeValue::S(name)) if name == domain.as_str() => {}
            _ => return Err(corrupt(domain, "the progress of another domain")),
        }
        let dead = match item.get(attr::DEAD) {
            None => BTreeSet::new(),
            Some(AttributeValue::Ns(seqs)) => seqs
                .iter()
                .map(|n| count_of(Some(&AttributeValue::N(n.clone()))))
                .collect::<Option<BTreeSet<u64>>>()
                .ok_or_else(|| corrupt(domain, "a dead letter number"))?,
            Some(_) => return Err(corrupt(domain, "dead letters that are not a number set")),
        };
        let progress = Progress {
            part,
            last: count(attr::LAST)?,
            done: count(attr::DONE)?,
            kept: count(attr::KEPT)?,
            ver: count(attr::VER)?,
            relay,
            dead,
        };
        if progress.done > progress.last
            || progress.kept == 0
            || progress.kept > progress.last.saturating_add(1)
        {
            return Err(corrupt(
                domain,
                format!(
                    "progress last {} done {} kept {}",
                    progress.last, progress.done, progress.kept
                ),
            ));
        }
        Ok(Some(progress))
    }
}

/// A new pending entry's item (its key set by the caller).
pub(crate) fn entry_item(
    seq: u64,
    key: &IdempotencyKey,
    op_id: &str,
    effect: &Effect,
    token: FencingToken,
    at_ms: u64,
) -> Item {
    Item::from([
        (attr::SEQ.to_owned(), number(seq)),
        (attr::KEY.to_owned(), text(key.as_str())),
        (attr::OP.to_owned(), text(op_id)),
        (attr::KIND.to_owned(), text(effect.kind())),
        (attr::DEST.to_owned(), text(effect.destination())),
        (
            attr::PAYLOAD.to_owned(),
            AttributeValue::B(Blob::new(effect.payload().to_vec())),
        ),
        (attr::TOKEN.to_owned(), number(token.get())),
        (attr::AT.to_owned(), number(at_ms)),
        (attr::STATUS.to_owned(), text("p")),
        (attr::ATTEMPTS.to_owned(), number(0)),
    ])
}

/// The entry `item` holds, as entry `seq` of `domain`.
pub(crate) fn decode_entry(
    domain: &Domain,
    seq: u64,
    item: &Item,
) -> Result<OutboxEntry, FenceError> {
    let bad = |name: &str| corrupt(domain, format!("entry {seq}: attribute `{name}`"));
    let count = |name: &str| count_of(item.get(name)).ok_or_else(|| bad(name));
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        _ => Err(bad(name)),
    };
    if count(attr::SEQ)? != seq {
        return Err(bad(attr::SEQ));
    }
    let payload = match item.get(attr::PAYLOAD) {
        Some(AttributeValue::B(blob)) => blob.clone().into_inner(),
        _ => return Err(bad(attr::PAYLOAD)),
    };
    let token = FencingToken::new(count(attr::TOKEN)?).map_err(|_| bad(attr::TOKEN))?;
    let attempts = u32::try_from(count(attr::ATTEMPTS)?).map_err(|_| bad(attr::ATTEMPTS))?;
    let last_error = match item.get(attr::ERROR) {
        None => None,
        Some(_) => Some(string(attr::ERROR)?),
    };
    let status = match string(attr::STATUS)?.as_str() {
        "p" => EntryStatus::Pending {
            attempts,
            last_error,
        },
        "d" => EntryStatus::Delivered {
            attempts,
            at_ms: count(attr::SETTLED_AT)?,
        },
        "x" => EntryStatus::DeadLettered {
            attempts,
            at_ms: count(attr::SETTLED_AT)?,
            last_error: last_error.unwrap_or_default(),
        },
        _ => return Err(bad(attr::STATUS)),
    };
    Ok(OutboxEntry::new(
        domain.clone(),
        seq,
        IdempotencyKey::from_recorded(string(attr::KEY)?),
        Effect::new(string(attr::KIND)?, string(attr::DEST)?, payload),
        token,
        count(attr::AT)?,
        status,
    ))
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_corrupt() {
        let domain = Domain::new("order/1").unwrap_or_else(|e| panic!("{e}"));
        let token = FencingToken::new(u64::MAX).unwrap_or_else(|e| panic!("{e}"));
        let effect = Effect::new("send-receipt-email", "https://mail.example/", "hi");
        let key = IdempotencyKey::from_recorded("order%2F1:18446744073709551615:pay:0".into());
        let item = entry_item(3, &key, "pay", &effect, token, 17);
        let entry = decode_entry(&domain, 3, &item).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (entry.seq, entry.token, entry.recorded_at_ms),
            (3, token, 17)
        );
        assert_eq!(entry.key, key);
        assert_eq!(&entry.payload[..], b"hi");
        assert_eq!(
            entry.status,
            EntryStatus::Pending {
                attempts: 0,
                last_error: None
            }
        );
        assert!(decode_entry(&domain, 4, &item).is_err(), "another seq");
        let mut damaged = item.clone();
        damaged.insert(attr::STATUS.into(), text("?"));
        assert!(decode_entry(&domain, 3, &damaged).is_err());
        let mut progress = Item::from([
            (attr::DOMAIN.to_owned(), text("order/1")),
            (attr::PART.to_owned(), number(0)),
            (attr::LAST.to_owned(), number(2)),
            (attr::DONE.to_owned(), number(3)),
            (attr::KEPT.to_owned(), number(1)),
            (attr::VER.to_owned(), number(1)),
        ]);
        assert!(
            Progress::decode(&domain, Some(&progress)).is_err(),
            "done above last"
        );
        progress.insert(attr::DONE.into(), number(1));
        let decoded = Progress::decode(&domain, Some(&progress)).unwrap_or_else(|e| panic!("{e}"));
        assert!(decoded.is_some_and(|p| (p.last, p.done, p.kept, p.relay) == (2, 1, 1, None)));
        progress.insert(attr::DOMAIN.into(), text("order/2"));
        assert!(
            Progress::decode(&domain, Some(&progress)).is_err(),
            "another domain's"
        );
    }
}
