//! The column decoders of a domain's mark row (what a lock read and what a change writes are
//! fence-sql's `Locked`, `MarkChange` and `Remember`). The statements that lock and change the
//! row are in `mark_rows.rs`. (Store writes run the schema's `fence_write` instead.)

use std::num::NonZeroU64;

use fence_core::raw::{EntryHead, StoredOp};
use fence_core::{Domain, FenceError, FencingToken, Revision};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::{corrupt, token_column};

/// The counter's last token as read (`None`: no row, or a counter at 0 that issued nothing).
pub(crate) fn issued_column(
    domain: &Domain,
    last: Option<String>,
) -> Result<Option<FencingToken>, FenceError> {
    match last.as_deref() {
        None | Some("0") => Ok(None),
        Some(last) => Ok(Some(token_column(domain, last, "issued counter")?)),
    }
}

/// A step bound as read from the schema (`None`: no bound); anything but a token fails closed.
pub(crate) fn step_column(
    domain: &Domain,
    step: Option<String>,
) -> Result<Option<NonZeroU64>, FenceError> {
    step.map(|step| parse_step(&step).map_err(|why| corrupt(domain, why)))
        .transpose()
}

/// A stored step bound: a canonical token (FORMATS.md §1.1).
pub(crate) fn parse_step(text: &str) -> Result<NonZeroU64, String> {
    text.parse::<FencingToken>()
        .map(|step| NonZeroU64::new(step.get()).unwrap_or(NonZeroU64::MIN))
        .map_err(|e| format!("step bound `{text}`: {e}"))
}

/// The mark and the entry's head of a row, validated: anything not Fence's fails closed.
/// `fresh` says the row was created by this transaction (its mark is still NULL).
pub(crate) fn decode_head(
    domain: &Domain,
    row: &PgRow,
    fresh: bool,
) -> Result<(Option<FencingToken>, Option<EntryHead>), FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("mark row: {e}"));
    let hwm: Option<String> = row.try_get(0).map_err(column)?;
    let state: Option<i8> = row.try_get(1).map_err(column)?;
    let revision: Option<i64> = row.try_get(2).map_err(column)?;
    let writer: Option<String> = row.try_get(3).map_err(column)?;
    let hwm = match (hwm, fresh) {
        (Some(text), _) => Some(token_column(domain, &text, "high-water mark")?),
        (None, true) => None,
        (None, false) => return Err(corrupt(domain, "mark row without a high-water mark")),
    };
    let writer = writer
        .map(|w| token_column(domain, &w, "writer token"))
        .transpose()?;
    // A negative revision is no revision: the shared check refuses it as malformed.
    let revision = revision.map(|r| u64::try_from(r).unwrap_or(0));
    let entry = EntryHead::from_columns(hwm, state.map(|s| s as u8), revision, writer)
        .map_err(|why| corrupt(domain, why))?;
    Ok((hwm, entry))
}

/// A remembered operation's row: kind, revision and previous mark in columns `first..first + 3`
/// (`None` when the kind is NULL: nothing remembered).
pub(crate) fn decode_op(
    domain: &Domain,
    row: &PgRow,
    first: usize,
) -> Result<Option<StoredOp>, FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("operation record: {e}"));
    let kind: Option<String> = row.try_get(first).map_err(column)?;
    let revision: Option<i64> = row.try_get(first + 1).map_err(column)?;
    let previous: Option<String> = row.try_get(first + 2).map_err(column)?;
    let Some(kind) = kind else {
        return Ok(None);
    };
    let previous = previous
        .map(|p| token_column(domain, &p, "operation record's previous mark"))
        .transpose()?;
    let revision = revision.map(|r| u64::try_from(r).unwrap_or(0));
    StoredOp::from_columns(&kind, revision, previous)
        .map(Some)
        .map_err(|why| corrupt(domain, why))
}

pub(crate) fn revision_i64(revision: Revision) -> i64 {
    i64::try_from(revision.get()).unwrap_or(i64::MAX)
}
