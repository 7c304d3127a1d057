//! Running a script in the fenced envelope (`lua/fenced.lua`): the one path every fenced
//! mutation takes, fence-redis's own (write, delete, claim), users' fenced scripts and
//! extensions' bodies alike.

use std::num::NonZeroU64;

use fence_core::{
    Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, IssuerView, OpKind,
    Operation, OperationId,
};
use redis::Value;

use crate::connection::Waited;
use crate::error::BACKEND;
use crate::fence::RedisFence;
use crate::reply::Reply;
use crate::scripts::LuaScript;

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

impl RedisFence {
    /// Runs `script` (built with [`LuaScript::fenced`]) for `call`, with the body's `keys`
    /// (full key names) and `args`.
    pub(crate) async fn run_fenced(
        &self,
        script: &LuaScript,
        call: &Envelope<'_>,
        keys: impl IntoIterator<Item = String>,
        args: &[&[u8]],
    ) -> Result<(Answer, Waited), FenceError> {
        let domain = call.domain;
        let mut all_keys = vec![
            self.inner.keys.state(domain),
            self.inner.keys.op(domain, call.token, call.op_id),
            self.inner.keys.sequence(domain),
            self.inner.keys.bounds(domain),
        ];
        all_keys.extend(keys);
        let token_text = call.token.to_string();
        let retention = self.retention_ms();
        let strict: &[u8] = if call.policy == EqualTokenPolicy::Strict {
            b"1"
        } else {
            b"0"
        };
        let max_step = self
            .inner
            .max_token_step
            .map_or_else(String::new, |step| step.to_string());
        let mut all_args: Vec<&[u8]> = vec![
            token_text.as_bytes(),
            strict,
            if call.op_id.is_some() { b"1" } else { b"0" },
            retention.as_bytes(),
            kind_code(call.kind),
            max_step.as_bytes(),
            if self.inner.issued_only { b"1" } else { b"0" },
            if self.inner.wait.is_some() {
                b"1"
            } else {
                b"0"
            },
        ];
        all_args.extend_from_slice(args);
        let (reply, waited) = self
            .eval_fenced(script, domain, call.operation, &all_keys, &all_args)
            .await?;
        let answer = match reply.tag.as_str() {
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
                    presented: call.token,
                    current,
                });
            }
            "unissued" => {
                return Err(FenceError::Unissued {
                    domain: domain.clone(),
                    presented: call.token,
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
                    presented: call.token,
                    current: reply.token(0)?,
                    max_step,
                });
            }
            "op_kind" => {
                let code = reply.text(0)?;
                let (Some(first), Some(op_id)) = (kind_of(&code), call.op_id) else {
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
                    now: call.kind,
                }
                .into());
            }
            "corrupt" => return Err(reply.into_error()),
            _ => Answer::Refused(reply),
        };
        Ok((answer, waited))
    }
}
