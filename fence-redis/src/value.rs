//! `ScriptValue`: what a fenced script returned, in fence-redis's own type, so that the public
//! API does not tie users to the redis client's version.

use std::fmt;

use fence_core::Bytes;
use redis::Value;

/// The value a fenced script (or an extension's body) returned, as Redis converts Lua values:
/// `nil`/`false` → [`ScriptValue::Nil`], numbers → [`ScriptValue::Integer`] (truncated),
/// strings → [`ScriptValue::Data`], tables → [`ScriptValue::Array`] (up to the first `nil`),
/// `{ok = ...}` → [`ScriptValue::Status`].
#[derive(Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum ScriptValue {
    /// No value.
    #[default]
    Nil,
    /// An integer.
    Integer(i64),
    /// A string, as bytes.
    Data(Bytes),
    /// A status reply (`{ok = 'text'}`).
    Status(String),
    /// A floating-point number (RESP3 scripts only).
    Double(f64),
    /// An array.
    Array(Vec<ScriptValue>),
}

/// The shape of the value, never its content: a script's result is the user's data, which
/// `Debug` (and so logs and panics) must not show, as [`fence_core::Entry`]'s does not.
impl fmt::Debug for ScriptValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptValue::Nil => f.write_str("Nil"),
            ScriptValue::Integer(_) => f.write_str("Integer(..)"),
            ScriptValue::Double(_) => f.write_str("Double(..)"),
            ScriptValue::Data(bytes) => write!(f, "Data({} bytes)", bytes.len()),
            ScriptValue::Status(text) => write!(f, "Status({} bytes)", text.len()),
            ScriptValue::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

impl ScriptValue {
    /// The bytes of a [`ScriptValue::Data`].
    pub fn as_data(&self) -> Option<&Bytes> {
        match self {
            ScriptValue::Data(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// The text of a UTF-8 [`ScriptValue::Data`] or of a [`ScriptValue::Status`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            ScriptValue::Data(bytes) => std::str::from_utf8(bytes).ok(),
            ScriptValue::Status(text) => Some(text),
            _ => None,
        }
    }

    /// The number of a [`ScriptValue::Integer`], or of a [`ScriptValue::Data`] holding one.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            ScriptValue::Integer(n) => Some(*n),
            other => other.as_str()?.parse().ok(),
        }
    }

    /// Converts the client's reply; `Err` names a reply shape a script cannot produce.
    pub(crate) fn from_reply(value: Value) -> Result<Self, String> {
        Ok(match value {
            Value::Nil => ScriptValue::Nil,
            Value::Int(n) => ScriptValue::Integer(n),
            Value::Boolean(b) => ScriptValue::Integer(i64::from(b)),
            Value::BulkString(bytes) => ScriptValue::Data(Bytes::from(bytes)),
            Value::VerbatimString { text, .. } => ScriptValue::Data(Bytes::from(text)),
            Value::SimpleString(text) => ScriptValue::Status(text),
            Value::Okay => ScriptValue::Status("OK".to_owned()),
            Value::Double(x) => ScriptValue::Double(x),
            Value::Array(items) | Value::Set(items) => ScriptValue::Array(
                items
                    .into_iter()
                    .map(ScriptValue::from_reply)
                    .collect::<Result<_, _>>()?,
            ),
            other => return Err(format!("a script cannot return {other:?}")),
        })
    }
}

impl From<&str> for ScriptValue {
    fn from(text: &str) -> Self {
        ScriptValue::Data(Bytes::copy_from_slice(text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_shape_never_the_content() {
        let value = ScriptValue::Array(vec![
            ScriptValue::Data(Bytes::from_static(b"card 4111")),
            ScriptValue::Status("s3cret".into()),
            ScriptValue::Integer(42),
            ScriptValue::Nil,
        ]);
        assert_eq!(
            format!("{value:?}"),
            "[Data(9 bytes), Status(6 bytes), Integer(..), Nil]"
        );
    }
}
