//! Raw access for crates layered on fence-redis (such as fence-outbox-redis): unfenced scripts
//! that share the prelude, single commands with the fence's error mapping, and a keyspace scan
//! that covers every cluster master. None of it is fenced, so none of it is in the ordinary API:
//! it exists only with the `unstable-raw` feature and may change in any release. Fenced
//! mutations of extensions go through [`crate::FencedBody`].

use std::fmt;

use fence_core::{Domain, FenceError, Operation};
use redis::Value;

use crate::error::map_error;
use crate::fence::RedisFence;
use crate::scripts::LuaScript;

/// An unfenced script: fence-redis's prelude (exact token comparison, `field`, `is_token`)
/// followed by a body, run by [`RedisFence::eval_script`].
pub struct RedisScript {
    script: LuaScript,
}

impl RedisScript {
    /// The prelude plus `body`; `name` appears in errors about the script's replies.
    pub fn new(name: &'static str, body: &str) -> Self {
        RedisScript {
            script: LuaScript::with_prelude(name, body),
        }
    }

    /// The script's name.
    pub fn name(&self) -> &'static str {
        self.script.name
    }
}

impl fmt::Debug for RedisScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisScript")
            .field("name", &self.script.name)
            .field("sha", &self.script.sha)
            .finish()
    }
}

impl RedisFence {
    /// Runs `script` (not fenced: it may read or write any key it is given) on the node that
    /// serves `domain`'s slot. `mutating` says whether a lost reply leaves the outcome unknown.
    pub async fn eval_script(
        &self,
        script: &RedisScript,
        domain: &Domain,
        mutating: bool,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<Value, FenceError> {
        let operation = if mutating {
            Operation::Write
        } else {
            Operation::Read
        };
        let (value, _) = self
            .eval_raw(
                &script.script,
                domain,
                operation,
                mutating,
                None,
                keys,
                args,
            )
            .await?;
        Ok(value)
    }

    /// Runs one command (not fenced), with the fence's error mapping.
    pub async fn query(&self, cmd: &redis::Cmd) -> Result<Value, FenceError> {
        let connection = self.connection(None).await?;
        connection
            .query(cmd)
            .await
            .map_err(|e| map_error(e, None, Operation::Read, true))
    }

    /// Every key matching `pattern` (a `SCAN MATCH` glob), on every master of a cluster.
    /// Costs a walk of the whole keyspace: for recovery sweeps, not for hot paths.
    pub async fn scan_keys(&self, pattern: &str) -> Result<Vec<String>, FenceError> {
        self.scan(pattern).await
    }
}
