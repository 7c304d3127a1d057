//! Parsing script replies: `{tag, field, ...}` arrays of strings.

use fence_core::{Domain, FenceError, FencingToken, Revision};
use redis::Value;

use crate::error::{unexpected, BACKEND};

/// A script's reply: its tag and fields.
pub(crate) struct Reply {
    script: &'static str,
    domain: Domain,
    pub(crate) tag: String,
    fields: Vec<Value>,
}

impl Reply {
    pub(crate) fn parse(
        script: &'static str,
        domain: &Domain,
        value: Value,
    ) -> Result<Self, FenceError> {
        let Value::Array(mut items) = value else {
            return Err(unexpected(
                script,
                domain,
                format!("not an array: {value:?}"),
            ));
        };
        if items.is_empty() {
            return Err(unexpected(script, domain, "empty reply"));
        }
        let tag = match items.remove(0) {
            Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            other => return Err(unexpected(script, domain, format!("tag is {other:?}"))),
        };
        Ok(Reply {
            script,
            domain: domain.clone(),
            tag,
            fields: items,
        })
    }

    /// The raw field at `index` (a missing trailing field reads as `Nil`).
    pub(crate) fn value(&self, index: usize) -> Value {
        self.fields.get(index).cloned().unwrap_or(Value::Nil)
    }

    pub(crate) fn bytes(&self, index: usize) -> Result<Vec<u8>, FenceError> {
        match self.fields.get(index) {
            Some(Value::BulkString(bytes)) => Ok(bytes.clone()),
            other => Err(unexpected(
                self.script,
                &self.domain,
                format!("field {index} is {other:?}"),
            )),
        }
    }

    pub(crate) fn text(&self, index: usize) -> Result<String, FenceError> {
        let bytes = self.bytes(index)?;
        String::from_utf8(bytes).map_err(|_| {
            unexpected(
                self.script,
                &self.domain,
                format!("field {index} is not UTF-8"),
            )
        })
    }

    /// A token field; empty means none.
    pub(crate) fn token(&self, index: usize) -> Result<Option<FencingToken>, FenceError> {
        parse_token(&self.domain, &self.text(index)?)
    }

    /// A revision field; empty means none.
    pub(crate) fn revision(&self, index: usize) -> Result<Option<Revision>, FenceError> {
        parse_revision(&self.domain, &self.text(index)?)
    }

    /// The error for a reply whose tag this operation does not expect, or for `corrupt`.
    pub(crate) fn into_error(self) -> FenceError {
        if self.tag == "corrupt" {
            let detail = self.text(0).unwrap_or_default();
            return FenceError::corrupt(BACKEND, &self.domain, detail);
        }
        unexpected(
            self.script,
            &self.domain,
            format!("unknown tag `{}`", self.tag),
        )
    }
}

/// Parses a stored token; anything but canonical decimal is corrupt state.
pub(crate) fn parse_token(domain: &Domain, text: &str) -> Result<Option<FencingToken>, FenceError> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|e| FenceError::corrupt(BACKEND, domain, format!("stored token: {e}")))
}

/// Parses a stored revision.
pub(crate) fn parse_revision(domain: &Domain, text: &str) -> Result<Option<Revision>, FenceError> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<u64>()
        .map(|r| Some(Revision::new(r)))
        .map_err(|_| {
            FenceError::corrupt(
                BACKEND,
                domain,
                format!("stored revision `{text}` is not a number"),
            )
        })
}
