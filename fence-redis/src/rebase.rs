//! An operator's re-base of a domain whose mark was pushed to a token no one issued: one
//! script checks the reviewed mark and the domain's sequence, lowers the mark and records who
//! did it in the domain's audit list (`<prefix>:{<domain>}:rebases`, one line per re-base:
//! [`RebaseRecord::to_line`]).

use async_trait::async_trait;
use fence_core::{Domain, FenceError, IssuerView, Operation, Rebase, RebaseRecord, Rebaser};
use redis::Value;

use crate::error::{map_error, unexpected, BACKEND};
use crate::fence::RedisFence;
use crate::scripts::REBASE;

#[async_trait]
impl Rebaser for RedisFence {
    /// Re-bases `domain` (see [`Rebase::decide`]): refused unless the mark is still the
    /// reviewed one; the new mark is never below the last token this Redis issued for the
    /// domain (its `seq` key), and the entry's writer token is lowered to it if above. Returns the
    /// record it appended to the domain's audit list (see [`Rebaser::rebases`]).
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let keys = &self.inner.keys;
        let (to, expected) = (rebase.to().to_string(), rebase.expected_mark().to_string());
        let reply = self
            .eval(
                &REBASE,
                domain,
                Operation::Rebase,
                true,
                &[
                    keys.state(domain),
                    keys.sequence(domain),
                    keys.rebases(domain),
                ],
                &[
                    to.as_bytes(),
                    expected.as_bytes(),
                    rebase.operator().as_str().as_bytes(),
                    rebase.reason().as_bytes(),
                    if rebase.is_issuer_elsewhere() {
                        b"1"
                    } else {
                        b"0"
                    },
                ],
            )
            .await?;
        // The script decides as fence-core's `Rebase::decide` does; a refusal is worded by
        // `decide` itself, on what the script found.
        let refused = |mark, issuer| match rebase.decide(domain, mark, issuer) {
            Err(refusal) => Err(refusal),
            Ok(_) => Err(unexpected("rebase", domain, "a refusal fence-core admits")),
        };
        match reply.tag.as_str() {
            "ok" => parse_record(domain, &reply.text(0)?),
            "moved" => refused(reply.token(0)?, IssuerView::Unchecked),
            "no_issuer" => refused(Some(rebase.expected_mark()), IssuerView::IssuedUpTo(None)),
            "passed" => refused(
                Some(rebase.expected_mark()),
                IssuerView::IssuedUpTo(reply.token(0)?),
            ),
            _ => Err(reply.into_error()),
        }
    }

    /// The re-bases of `domain`, oldest first.
    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(self.inner.keys.rebases(domain)).arg(0).arg(-1);
        let answer = self
            .connection(Some(domain))
            .await?
            .query(&cmd)
            .await
            .map_err(|e| map_error(e, Some(domain), Operation::Read, false))?;
        let Value::Array(lines) = answer else {
            return Err(unexpected("rebases", domain, "LRANGE answered no array"));
        };
        lines
            .into_iter()
            .map(|line| match line {
                Value::BulkString(bytes) => parse_record(domain, &String::from_utf8_lossy(&bytes)),
                other => Err(unexpected("rebases", domain, format!("entry {other:?}"))),
            })
            .collect()
    }
}

fn parse_record(domain: &Domain, line: &str) -> Result<RebaseRecord, FenceError> {
    RebaseRecord::parse_line(line).map_err(|detail| {
        FenceError::corrupt(
            BACKEND,
            domain,
            format!("re-base record `{line}`: {detail}"),
        )
    })
}
