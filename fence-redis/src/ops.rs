//! The operation ids a domain remembers, listed for inspection (`fence inspect`): each is a key
//! `<prefix>:{<domain>}:op:<token>:<escaped op id>` holding `<kind>|<previous mark>|<outcome>`
//! until its retention ends.

use fence_core::{Domain, FenceError, Operation, OperationId, RememberedOp};
use redis::Value;

use crate::envelope::kind_of;
use crate::error::{map_error, BACKEND};
use crate::fence::RedisFence;
use crate::reply::parse_token;

impl RedisFence {
    /// The operation ids `domain` still remembers, oldest token first. Walks the keyspace with
    /// `SCAN` (every master of a cluster): for operators, not for hot paths.
    pub async fn remembered_ops(&self, domain: &Domain) -> Result<Vec<RememberedOp>, FenceError> {
        let base = self.inner.keys.ops_prefix(domain);
        let keys = self.scan(&format!("{}*", glob_escape(&base))).await?;
        let connection = self.connection(Some(domain)).await?;
        let mut ops = Vec::new();
        for key in keys {
            let corrupt = |what: &str| {
                FenceError::corrupt(BACKEND, domain, format!("op-id key `{key}`: {what}"))
            };
            let (token, op) = key
                .strip_prefix(&base)
                .and_then(|rest| rest.split_once(':'))
                .ok_or_else(|| corrupt("not an op-id key"))?;
            let token = parse_token(domain, token)?.ok_or_else(|| corrupt("no token"))?;
            let op_id = OperationId::from_escaped(op).ok_or_else(|| corrupt("bad op id"))?;
            let value = connection
                .query(redis::cmd("GET").arg(&key))
                .await
                .map_err(|e| map_error(e, Some(domain), Operation::Read, false))?;
            let record = match value {
                Value::BulkString(bytes) => {
                    String::from_utf8(bytes).map_err(|_| corrupt("not UTF-8"))?
                }
                Value::Nil => continue, // its retention ended meanwhile
                other => return Err(corrupt(&format!("holds {other:?}"))),
            };
            let mut parts = record.splitn(3, '|');
            let (Some(kind), Some(previous), Some(outcome)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(corrupt("not `<kind>|<previous>|<outcome>`"));
            };
            ops.push(RememberedOp::new(
                token,
                op_id,
                kind_of(kind).ok_or_else(|| corrupt("unknown kind"))?,
                parse_token(domain, previous)?,
                outcome,
            ));
        }
        ops.sort_by(|a, b| (a.token, a.op_id.as_str()).cmp(&(b.token, b.op_id.as_str())));
        Ok(ops)
    }
}

/// `text` matched literally by a `SCAN MATCH` glob (metacharacters escaped).
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))]
pub fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn globs_match_only_the_literal_text() {
        assert_eq!(
            super::glob_escape("a*b?[c]\\:{x}"),
            "a\\*b\\?\\[c\\]\\\\:{x}"
        );
    }
}
