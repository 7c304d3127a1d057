//! Fenced user scripts: your own Lua mutation, run after the fence check in the same script.

use std::fmt;

use fence_core::telemetry::{observe, OutcomeLabel};
use fence_core::{Domain, EqualTokenPolicy, FenceError, FencingToken, Operation, OperationId};
use redis::Value;

use crate::error::BACKEND;
use crate::fence::{fenced, strict_flag, RedisFence};
use crate::reply::parse_token;
use crate::scripts::LuaScript;

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
            script: LuaScript::fenced_user_script(lua),
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
    domain: Domain,
    token: FencingToken,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
    op_id: Option<OperationId>,
    policy: EqualTokenPolicy,
}

impl ScriptCall {
    /// A call under `token` on `domain`.
    pub fn new(domain: Domain, token: FencingToken) -> Self {
        ScriptCall {
            domain,
            token,
            keys: Vec::new(),
            args: Vec::new(),
            op_id: None,
            policy: EqualTokenPolicy::SameOwner,
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

    /// Sets the operation id: a retry returns [`ScriptOutcome::duplicate`] without running.
    pub fn with_op_id(mut self, op_id: OperationId) -> Self {
        self.op_id = Some(op_id);
        self
    }

    /// Sets the equal-token policy.
    pub fn with_policy(mut self, policy: EqualTokenPolicy) -> Self {
        self.policy = policy;
        self
    }
}

impl fmt::Debug for ScriptCall {
    // Arguments may be secret: only their count is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptCall")
            .field("domain", &self.domain)
            .field("token", &self.token)
            .field("keys", &self.keys)
            .field("args", &self.args.len())
            .field("op_id", &self.op_id)
            .field("policy", &self.policy)
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
    pub result: Value,
    /// True when the operation id had already run: nothing ran again.
    pub duplicate: bool,
    /// Replicas that acknowledged, when the fence waits for them.
    pub replicas_acknowledged: Option<u32>,
}

impl OutcomeLabel for ScriptOutcome {
    fn outcome_label(&self) -> &'static str {
        if self.duplicate {
            "duplicate"
        } else {
            "accepted"
        }
    }
}

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
            &call.domain,
            Some(call.token),
            self.run_script_now(script, call),
        )
        .await
    }

    async fn run_script_now(
        &self,
        script: &FencedScript,
        call: &ScriptCall,
    ) -> Result<ScriptOutcome, FenceError> {
        let domain = &call.domain;
        let size: usize = call.args.iter().map(Vec::len).sum();
        self.check_size(domain, size)?;
        let mut keys = Vec::with_capacity(call.keys.len() + 2);
        keys.push(self.inner.keys.state(domain));
        keys.push(self.inner.keys.op(domain, call.token, call.op_id.as_ref()));
        for name in &call.keys {
            keys.push(self.inner.keys.user(domain, name)?);
        }
        let token_text = call.token.to_string();
        let retention = self.retention_ms();
        let mut args: Vec<&[u8]> = vec![
            token_text.as_bytes(),
            strict_flag(call.policy),
            if call.op_id.is_some() { b"1" } else { b"0" },
            retention.as_bytes(),
        ];
        args.extend(call.args.iter().map(Vec::as_slice));
        let (reply, waited) = self
            .eval_fenced(&script.script, domain, Operation::Write, &keys, &args)
            .await?;
        let (previous, result, duplicate) = match reply.tag.as_str() {
            "ok" => (reply.token(0)?, reply.value(1), false),
            "dup" => (parse_token(domain, &reply.text(0)?)?, Value::Nil, true),
            "fenced" => return Err(fenced(domain, call.token, &reply)?),
            _ => return Err(reply.into_error()),
        };
        let replicas_acknowledged = self.replicas(domain, Operation::Write, waited)?;
        Ok(ScriptOutcome {
            token: call.token,
            previous_high_water_mark: previous,
            result,
            duplicate,
            replicas_acknowledged,
        })
    }
}
