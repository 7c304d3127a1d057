//! The relay's side of the Redis outbox.

use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Domain, FencingToken};
use fence_redis::redis::{self, Value};
use fence_redis::unstable::glob_escape;

use crate::outbox::{RedisOutbox, ENTRIES, META};
use crate::reply::BACKEND;
use crate::reply::{corrupt, parse, with_presented};
use crate::scripts;
use fence_outbox::OutboxError;
use fence_outbox::{Candidate, OutboxStore, Purged};
use fence_outbox::{OutboxEntry, Settlement};

/// The most delivered entries one purge call removes.
const PURGE_BATCH: usize = 1000;

impl RedisOutbox {
    fn outbox_keys(&self, domain: &Domain) -> Result<[String; 2], OutboxError> {
        Ok([
            self.fence.user_key(domain, META)?,
            self.fence.user_key(domain, ENTRIES)?,
        ])
    }

    /// Runs a relay script that carries the relay token first; maps a refusal to `Fenced`.
    async fn relay_script(
        &self,
        script: &fence_redis::unstable::RedisScript,
        domain: &Domain,
        relay: FencingToken,
        args: &[&[u8]],
    ) -> Result<crate::reply::Reply, OutboxError> {
        let keys = self.outbox_keys(domain)?;
        let relay_text = relay.to_string();
        let mut all: Vec<&[u8]> = vec![relay_text.as_bytes()];
        all.extend_from_slice(args);
        let value = self
            .fence
            .eval_script(script, domain, true, &keys, &all)
            .await?;
        Ok(parse(domain, value).map_err(|e| with_presented(e, relay))?)
    }

    /// Walks every outbox of the prefix and indexes the domains of `partition` with work.
    async fn sweep(&self, partition: u16) -> Result<(), OutboxError> {
        let pattern = format!("{}:{{*}}:u:{META}", glob_escape(self.fence.prefix()));
        let keys = self.fence.scan_keys(&pattern).await?;
        let mut recovered = 0usize;
        for key in keys {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&key)
                .arg("outbox")
                .arg("domain")
                .arg("partition")
                .arg("last")
                .arg("done")
                .arg("purged");
            let fields: Vec<Option<String>> = match self.fence.query(&cmd).await {
                Ok(value) => redis::from_redis_value(value).unwrap_or_default(),
                Err(error) => {
                    tracing::warn!(key, %error, "outbox sweep could not read a domain");
                    continue;
                }
            };
            let [Some(marker), Some(domain), Some(part), Some(last), Some(done), Some(purged)] =
                <[Option<String>; 6]>::try_from(fields).unwrap_or_default()
            else {
                continue;
            };
            let Ok(domain) = Domain::new(domain) else {
                continue;
            };
            let busy = last != done || done != purged;
            if marker == "1" && part == partition.to_string() && busy {
                self.index(&domain).await;
                recovered += 1;
            }
        }
        tracing::debug!(partition, recovered, "outbox sweep done");
        Ok(())
    }
}

#[async_trait]
impl OutboxStore for RedisOutbox {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn candidates(&self, partition: u16, sweep: bool) -> Result<Vec<Candidate>, OutboxError> {
        if sweep {
            self.sweep(partition).await?;
        }
        let value = self
            .fence
            .query(redis::cmd("HGETALL").arg(self.index_key(partition)))
            .await?;
        let pairs: Vec<(String, String)> = redis::from_redis_value(value).map_err(|e| {
            OutboxError::Configuration(format!("outbox index is not a hash of versions: {e}"))
        })?;
        Ok(Candidate::listed(pairs))
    }

    async fn pending(
        &self,
        domain: &Domain,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let keys = self.outbox_keys(domain)?;
        let limit = limit.max(1).to_string();
        let value = self
            .fence
            .eval_script(&scripts::PENDING, domain, false, &keys, &[limit.as_bytes()])
            .await?;
        Ok(parse(domain, value)?.entries(domain)?)
    }

    async fn begin(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
    ) -> Result<Option<u32>, OutboxError> {
        let seq_text = seq.to_string();
        let reply = self
            .relay_script(&scripts::BEGIN, domain, relay, &[seq_text.as_bytes()])
            .await?;
        match reply.tag.as_str() {
            "ok" => {
                let attempts = reply.number(domain, 0)?;
                Ok(Some(u32::try_from(attempts).unwrap_or(u32::MAX)))
            }
            "moved" => Ok(None),
            other => Err(corrupt(domain, format!("unexpected begin reply `{other}`")).into()),
        }
    }

    async fn settle(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settlement: &Settlement,
    ) -> Result<bool, OutboxError> {
        let seq_text = seq.to_string();
        let (code, error) = settlement.code();
        let outcome = code.to_string();
        let reply = self
            .relay_script(
                &scripts::SETTLE,
                domain,
                relay,
                &[seq_text.as_bytes(), outcome.as_bytes(), error.as_bytes()],
            )
            .await?;
        match reply.tag.as_str() {
            "ok" => Ok(true),
            "moved" => Ok(false),
            other => Err(corrupt(domain, format!("unexpected settle reply `{other}`")).into()),
        }
    }

    async fn purge(
        &self,
        candidate: &Candidate,
        relay: FencingToken,
        retention: Duration,
        drained: bool,
    ) -> Result<Purged, OutboxError> {
        let domain = &candidate.domain;
        let retention = retention.as_millis().to_string();
        let batch = PURGE_BATCH.to_string();
        let reply = self
            .relay_script(
                &scripts::PURGE,
                domain,
                relay,
                &[retention.as_bytes(), batch.as_bytes()],
            )
            .await?;
        let removed = usize::try_from(reply.number(domain, 0)?).unwrap_or(usize::MAX);
        if drained {
            self.forget(candidate).await?;
        }
        Ok(Purged::new(removed))
    }
}

impl RedisOutbox {
    /// Removes a drained domain from its partition's index if its entry is still at
    /// `candidate`'s version.
    async fn forget(&self, candidate: &Candidate) -> Result<(), OutboxError> {
        let key = [self.index_key(self.config.partition_of(&candidate.domain))];
        let value = self
            .fence
            .eval_script(
                &scripts::FORGET,
                &candidate.domain,
                true,
                &key,
                &[
                    candidate.domain.as_str().as_bytes(),
                    candidate.version.as_bytes(),
                ],
            )
            .await?;
        match value {
            Value::Array(_) => Ok(()),
            other => Err(corrupt(
                &candidate.domain,
                format!("unexpected forget reply {other:?}"),
            )
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(super::glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(super::glob_escape("fence"), "fence");
    }
}
