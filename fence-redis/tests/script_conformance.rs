//! The conformance suite for fenced user scripts, an entry point that is not a trait method,
//! against the shared Redis: the script counts its own runs in a key of the domain.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::entry::{Call, EntryHarness, Ran};
use fence_core::{Domain, Fence, FenceError, Observed};
use fence_redis::redis;
use fence_redis::{FencedScript, RedisFence, ScriptCall};
use fence_testkit::redis as support;

struct ScriptHarness {
    fence: Observed<RedisFence>,
    script: FencedScript,
    url: String,
}

#[async_trait]
impl EntryHarness for ScriptHarness {
    async fn run(&self, call: &Call) -> Result<Ran, FenceError> {
        let mut script_call = ScriptCall::new(call.domain.clone(), call.token)
            .key("applied")
            .with_policy(call.policy);
        if let Some(op_id) = &call.op_id {
            script_call = script_call.with_op_id(op_id.clone());
        }
        let outcome = self.fence.run_script(&self.script, &script_call).await?;
        Ok(Ran {
            duplicate: outcome.duplicate,
            previous: outcome.previous_high_water_mark,
        })
    }

    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError> {
        let key = self.fence.user_key(domain, "applied")?;
        let mut raw = support::raw(&self.url).await;
        let count: Option<u64> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .expect("GET the run counter");
        Ok(count.unwrap_or(0))
    }

    fn fence(&self) -> Arc<dyn Fence> {
        Arc::new(self.fence.clone())
    }
}

async fn harness() -> Option<&'static ScriptHarness> {
    let url = support::shared_url()?;
    let fence = support::shared_fence("script-entry").await?;
    Some(Box::leak(Box::new(ScriptHarness {
        fence,
        script: FencedScript::new("return redis.call('INCR', KEYS[1])"),
        url,
    })))
}

fence_conformance::entry_conformance!(harness);
