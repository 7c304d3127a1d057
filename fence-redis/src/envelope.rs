//! The fenced envelope (`lua/fenced.lua`), run by `RedisFence::run_fenced`: the one path every fenced
//! mutation takes, fence-redis's own (write, delete, claim), users' fenced scripts and
//! extensions' bodies alike.

use std::num::NonZeroU64;

use fence_core::{
    Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, IssuerView, OpKind,
    Operation, OperationId,
};
use redis::Value;

use crate::error::BACKEND;
use crate::reply::Reply;

/// Who runs what in the envelope.
pub(crate) struct Envelope<'a> {
    pub(crate) domain: &'a Domain,
    pub(crate) token: FencingToken,
    pub(crate) policy: EqualTokenPolicy,
    pub(crate) op_id: Option<&'a OperationId>,
    pub(crate) kind: OpKind,
    pub(crate) operation: Operation,
}

/// What the envelope answered, once the fence's own refusals are mapped to errors.
pub(crate) enum Answer {
    /// The body ran: its remembered outcome and its result.
    Applied {
        previous: Option<FencingToken>,
        outcome: String,
        result: Value,
    },
    /// The op id had run: the first run's remembered outcome; nothing ran again.
    Replayed {
        previous: Option<FencingToken>,
        outcome: String,
    },
    /// The body's guard refused (its own reply, such as `mismatch`).
    Refused(Reply),
}

/// The letter an op-id record carries for its kind.
fn kind_code(kind: OpKind) -> &'static [u8] {
    match kind {
        OpKind::Write => b"w",
        OpKind::Append => b"a",
        OpKind::Script => b"s",
        OpKind::Extension => b"x",
        // Kinds fence-redis never runs in the envelope (a PostgreSQL transaction, and any
        // kind fence-core adds later) are stored as extensions, the envelope's catch-all.
        _ => b"x",
    }
}

pub(crate) fn kind_of(code: &str) -> Option<OpKind> {
    Some(match code {
        "w" => OpKind::Write,
        "a" => OpKind::Append,
        "s" => OpKind::Script,
        "x" => OpKind::Extension,
        _ => return None,
    })
}

impl Envelope<'_> {
    /// The letter this call's op-id record carries for its kind.
    pub(crate) fn kind_code(&self) -> &'static [u8] {
        kind_code(self.kind)
    }

    /// The envelope's reply as an answer; the fence's own refusals (stale, unissued, too far,
    /// an op id of another kind, corrupt state) as errors.
    pub(crate) fn answer(&self, reply: Reply) -> Result<Answer, FenceError> {
        let domain = self.domain;
        Ok(match reply.tag.as_str() {
            "ok" => Answer::Applied {
                previous: reply.token(0)?,
                outcome: reply.text(1)?,
                result: reply.value(2),
            },
            "dup" => Answer::Replayed {
                previous: reply.token(0)?,
                outcome: reply.text(1)?,
            },
            "fenced" => {
                let current = reply
                    .token(0)?
                    .ok_or_else(|| FenceError::corrupt(BACKEND, domain, "fenced without a mark"))?;
                return Err(FenceError::Fenced {
                    domain: domain.clone(),
                    presented: self.token,
                    current,
                });
            }
            "unissued" => {
                return Err(FenceError::Unissued {
                    domain: domain.clone(),
                    presented: self.token,
                    issuer: IssuerView::IssuedUpTo(reply.token(0)?),
                })
            }
            "too_far" => {
                // The step in force: this client's, or the domain's own if smaller.
                let max_step = reply
                    .token(1)?
                    .and_then(|step| NonZeroU64::new(step.get()))
                    .ok_or_else(|| {
                        FenceError::corrupt(BACKEND, domain, "a step refusal without a step")
                    })?;
                return Err(FenceError::TokenTooFar {
                    domain: domain.clone(),
                    presented: self.token,
                    current: reply.token(0)?,
                    max_step,
                });
            }
            "op_kind" => {
                let code = reply.text(0)?;
                let (Some(first), Some(op_id)) = (kind_of(&code), self.op_id) else {
                    return Err(FenceError::corrupt(
                        BACKEND,
                        domain,
                        format!("operation id record of unknown kind `{code}`"),
                    ));
                };
                return Err(InvalidInput::OpIdReused {
                    domain: domain.clone(),
                    op_id: op_id.clone(),
                    first,
                    now: self.kind,
                }
                .into());
            }
            "corrupt" => return Err(reply.into_error()),
            _ => Answer::Refused(reply),
        })
    }
}
