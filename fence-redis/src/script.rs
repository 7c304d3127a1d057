//! Fenced user scripts: your own Lua mutation, run after the fence check in the same script.

use std::fmt;

use fence_core::raw::pipeline;
use fence_core::raw::{observe, OutcomeLabel};
use fence_core::{Domain, FenceError, Fencing, FencingToken, OpKind, Operation};

use crate::connection::Waited;
use crate::envelope::{Answer, Envelope};
use crate::error::{unexpected, BACKEND};
use crate::fence::RedisFence;
use crate::scripts::LuaScript;
use crate::value::ScriptValue;

/// Your Lua mutation, wrapped so it runs only when the token passes the fence check, in the
/// same atomic script that advances the domain's high-water mark.
///
/// Inside your code, `KEYS` are the domain's keys you named in the [`ScriptCall`] (in order)
/// and `ARGV` are your arguments; the value you return comes back in
/// [`ScriptOutcome::result`]. Touch only keys passed in `KEYS`: they share the domain's hash
/// tag, so the script stays single-slot on Redis Cluster.
///
/// ```no_run
/// # async fn run(fence: fence_redis::RedisFence, token: fence_core::FencingToken) -> Result<(), fence_core::FenceError> {
/// use fence_redis::{FencedScript, ScriptCall};
/// let add_item = FencedScript::new(r#"
///     redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
///     return redis.call('INCRBY', KEYS[2], ARGV[3])
/// "#);
/// let domain = fence_core::Domain::new("cart-42")?;
/// let call = ScriptCall::new(domain, token)
///     .key("items").key("total")
///     .arg("sku-1").arg("2").arg("1998");
/// let outcome = fence.run_script(&add_item, &call).await?;
/// println!("total now {:?}", outcome.result);
/// # Ok(()) }
/// ```
pub struct FencedScript {
    script: LuaScript,
}

impl FencedScript {
    /// Wraps a Lua body (the text of a function taking `KEYS` and `ARGV`).
    pub fn new(lua: &str) -> Self {
        FencedScript {
            script: LuaScript::fenced_user_script("fenced user script", lua),
        }
    }

    /// The SHA1 the wrapped script is called by.
    pub fn sha(&self) -> &str {
        &self.script.sha
    }
}

impl fmt::Debug for FencedScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedScript")
            .field("sha", &self.script.sha)
            .finish_non_exhaustive()
    }
}

/// One call of a [`FencedScript`]: domain, token, the domain's keys and the arguments.
#[derive(Clone)]
pub struct ScriptCall {
    fencing: Fencing,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

fence_core::fenced_request!(
    ScriptCall,
    op_id_doc = "A duplicate returns [`ScriptOutcome::duplicate`] without running (the first run's result is not kept)."
);

impl ScriptCall {
    /// A call under `token` on `domain`.
    pub fn new(domain: Domain, token: FencingToken) -> Self {
        ScriptCall {
            fencing: Fencing::new(domain, token),
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds a key of the domain by name; the script sees it as the next `KEYS[i]`. Read it
    /// outside scripts at [`RedisFence::user_key`].
    pub fn key(mut self, name: impl Into<String>) -> Self {
        self.keys.push(name.into());
        self
    }

    /// Adds an argument; the script sees it as the next `ARGV[i]`.
    pub fn arg(mut self, value: impl AsRef<[u8]>) -> Self {
        self.args.push(value.as_ref().to_vec());
        self
    }
}

impl fmt::Debug for ScriptCall {
    // Arguments may be secret: only their count is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptCall")
            .field("fencing", &self.fencing)
            .field("keys", &self.keys)
            .field("args", &self.args.len())
            .finish()
    }
}

/// What a fenced script reported.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ScriptOutcome {
    /// The token the call carried (now the domain's high-water mark).
    pub token: FencingToken,
    /// The mark before the call.
    pub previous_high_water_mark: Option<FencingToken>,
    /// What the user's code returned (`Nil` for a duplicate: the first run's result is not kept).
    pub result: ScriptValue,
    /// True when the operation id had already run: nothing ran again.
    pub duplicate: bool,
    /// Replicas that acknowledged, when the fence waits for them.
    pub replicas_acknowledged: Option<u32>,
}

impl OutcomeLabel for ScriptOutcome {
    fn outcome_label(&self) -> &'static str {
        fence_core::raw::replay_label(self.duplicate)
    }
}

/// A fenced body supplied by a crate built on fence-redis (such as an outbox): fence-redis runs
/// it inside the same envelope as its own writes (admit → the body's guard → advance the mark →
/// the body → remember the op), so the extension never touches the fence's state or op records.
///
/// The Lua `body` sets `body = function(fence, KEYS, ARGV) ... return outcome, result end`
/// and, optionally, `guard = function(fence, KEYS, ARGV) ... end` (return a reply table such as
/// `{ 'corrupt', reason }` to refuse before anything changes, or nil). `fence` holds `token`,
/// `previous` (the mark before, `''` for none) and `state` (the domain's entry fields, to read);
/// the body gets no name of a fence key, so it cannot write the fence's state or op records. `outcome` (a string) is
/// remembered with the op id and returned on a replay; `result` is returned once. `helpers` is
/// Lua defining local functions for the body, placed after fence-redis's prelude (whose
/// functions, such as `is_token` and `field`, it may call).
pub struct FencedBody {
    script: LuaScript,
}

impl FencedBody {
    /// A body named `name` (for errors and traces).
    pub fn new(name: &'static str, helpers: &str, body: &str) -> Self {
        FencedBody {
            script: LuaScript::fenced(name, helpers, body),
        }
    }

    /// A body that calls `fenced_user_script(KEYS, ARGV)`: `user_lua` (your user's code) as a
    /// function defined before everything else, so it sees only the KEYS and ARGV the body
    /// passes it and can overwrite none of the envelope's, the helpers' or the body's variables.
    pub fn with_user_script(name: &'static str, helpers: &str, body: &str, user_lua: &str) -> Self {
        FencedBody {
            script: LuaScript::fenced_with_user(name, user_lua, helpers, body),
        }
    }

    /// The SHA1 the server knows the script by.
    pub fn sha(&self) -> &str {
        &self.script.sha
    }
}

impl fmt::Debug for FencedBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedBody")
            .field("name", &self.script.name)
            .field("sha", &self.script.sha)
            .finish()
    }
}

/// What a [`FencedBody`] run did.
#[non_exhaustive]
pub struct BodyOutcome {
    /// The token of the call (now the domain's high-water mark).
    pub token: FencingToken,
    /// The mark before the first run.
    pub previous_high_water_mark: Option<FencingToken>,
    /// The outcome the body remembered (the first run's, for a duplicate).
    pub outcome: String,
    /// What the body returned (`Nil` for a duplicate).
    pub result: ScriptValue,
    /// True when the op id had already run: nothing ran again.
    pub duplicate: bool,
    /// What `WAIT` answered, for [`RedisFence::replicas_acknowledged`].
    pub acks: ReplicaAcks,
}

/// The remembered outcome's length, not its text: it is the user's data.
impl fmt::Debug for BodyOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyOutcome")
            .field("token", &self.token)
            .field("previous_high_water_mark", &self.previous_high_water_mark)
            .field("outcome_bytes", &self.outcome.len())
            .field("result", &self.result)
            .field("duplicate", &self.duplicate)
            .field("acks", &self.acks)
            .finish()
    }
}

impl OutcomeLabel for BodyOutcome {
    fn outcome_label(&self) -> &'static str {
        fence_core::raw::replay_label(self.duplicate)
    }
}

/// The replicas' answer to the `WAIT` after a fenced body, judged by
/// [`RedisFence::replicas_acknowledged`] when the caller is ready (after its own follow-up
/// writes, for example).
#[derive(Debug)]
pub struct ReplicaAcks(Waited);

impl RedisFence {
    /// The full Redis key of a user key `name` of `domain` (the one [`ScriptCall::key`] passes).
    pub fn user_key(&self, domain: &Domain, name: &str) -> Result<String, FenceError> {
        Ok(self.inner.keys.user(domain, name)?)
    }

    /// Runs `script` under the fence: the token rule first (stale → [`FenceError::Fenced`] and
    /// nothing runs), then the mark advances, then your code runs, all in one Lua script.
    ///
    /// If your code raises an error, Redis does not undo the writes it made before the error;
    /// the mark has already advanced, so a stale holder still cannot write after it.
    pub async fn run_script(
        &self,
        script: &FencedScript,
        call: &ScriptCall,
    ) -> Result<ScriptOutcome, FenceError> {
        observe(
            BACKEND,
            Operation::Write,
            call.domain(),
            Some(call.token()),
            self.run_script_now(script, call),
        )
        .await
    }

    async fn run_script_now(
        &self,
        script: &FencedScript,
        call: &ScriptCall,
    ) -> Result<ScriptOutcome, FenceError> {
        let run = self
            .run_body_now(&script.script, call, OpKind::Script)
            .await?;
        let replicas_acknowledged = self.replicas_acknowledged(call.domain(), run.acks)?;
        Ok(ScriptOutcome {
            token: run.token,
            previous_high_water_mark: run.previous_high_water_mark,
            result: run.result,
            duplicate: run.duplicate,
            replicas_acknowledged,
        })
    }

    /// Runs an extension's fenced `body` for `call` (its keys are names under the domain, as
    /// for [`RedisFence::user_key`]). Refusals come back as [`FenceError`]s: `Fenced`, a
    /// reused op id, corrupt state, or whatever the body's guard answered, as a backend error.
    /// The replicas' acknowledgement is left to [`RedisFence::replicas_acknowledged`].
    pub async fn run_body(
        &self,
        body: &FencedBody,
        call: &ScriptCall,
    ) -> Result<BodyOutcome, FenceError> {
        observe(
            BACKEND,
            Operation::Write,
            call.domain(),
            Some(call.token()),
            self.run_body_now(&body.script, call, OpKind::Extension),
        )
        .await
    }

    /// Whether a fenced body's change reached the replicas the fence waits for: `Ok(None)`
    /// when it waits for none, `Ok(Some(n))` when `n` acknowledged, and
    /// [`FenceError::Unreplicated`] when fewer than asked did.
    pub fn replicas_acknowledged(
        &self,
        domain: &Domain,
        acks: ReplicaAcks,
    ) -> Result<Option<u32>, FenceError> {
        self.replicas(domain, Operation::Write, acks.0)
    }

    async fn run_body_now(
        &self,
        script: &LuaScript,
        call: &ScriptCall,
        kind: OpKind,
    ) -> Result<BodyOutcome, FenceError> {
        let domain = call.domain();
        let size: usize = call.args.iter().map(Vec::len).sum();
        pipeline::check_size(domain, size, Some(self.inner.max_value_bytes))?;
        let keys = call
            .keys
            .iter()
            .map(|name| self.inner.keys.user(domain, name))
            .collect::<Result<Vec<_>, _>>()?;
        let args: Vec<&[u8]> = call.args.iter().map(Vec::as_slice).collect();
        let envelope = Envelope {
            domain,
            token: call.token(),
            policy: call.policy(),
            op_id: call.op_id(),
            kind,
            operation: Operation::Write,
        };
        let (answer, waited) = self.run_fenced(script, &envelope, keys, &args).await?;
        let (previous, outcome, result, duplicate) = match answer {
            Answer::Applied {
                previous,
                outcome,
                result,
            } => {
                let result = ScriptValue::from_reply(result)
                    .map_err(|detail| unexpected(script.name, domain, detail))?;
                (previous, outcome, result, false)
            }
            Answer::Replayed { previous, outcome } => (previous, outcome, ScriptValue::Nil, true),
            Answer::Refused(reply) => return Err(reply.into_error()),
        };
        Ok(BodyOutcome {
            token: call.token(),
            previous_high_water_mark: previous,
            outcome,
            result,
            duplicate,
            acks: ReplicaAcks(waited),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_outcome_shows_lengths_never_the_users_data() {
        let token = FencingToken::new(3).unwrap_or_else(|e| unreachable!("{e}"));
        let outcome = BodyOutcome {
            token,
            previous_high_water_mark: None,
            outcome: "card 4111 1111".into(),
            result: ScriptValue::Data(fence_core::Bytes::from_static(b"s3cret")),
            duplicate: false,
            acks: ReplicaAcks(None),
        };
        let shown = format!("{outcome:?}");
        assert!(
            !shown.contains("4111") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(
            shown.contains("outcome_bytes: 14") && shown.contains("Data(6 bytes)"),
            "{shown}"
        );
    }
}
