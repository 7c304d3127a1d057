//! `RedisOutbox`: fenced transitions that record effects.

use std::fmt;
use std::sync::Arc;

use fence_core::raw::observe;
use fence_core::{
    Domain, FenceError, Fencing, FencingToken, InvalidInput, Observed, Operation, OperationId,
};
use fence_redis::redis;
use fence_redis::{FencedBody, RedisFence, ScriptCall, ScriptValue};

use crate::codec::pack;
use crate::reply::{corrupt, parse, BACKEND};
use crate::scripts;
use fence_outbox::OutboxConfig;
use fence_outbox::OutboxError;
use fence_outbox::{Effect, EffectKinds};
use fence_outbox::{IdempotencyKey, OutboxEntry};

pub(crate) const META: &str = "ob:meta";
pub(crate) const ENTRIES: &str = "ob:entries";

/// A fenced outbox on Redis: [`RedisOutbox::transition`] runs your state change and records
/// its effects in one Lua script, under the domain's fencing token. A stale token changes
/// nothing and records nothing.
///
/// Cheap to clone. Key names `ob:*` of the domain are reserved for the outbox.
#[derive(Clone)]
pub struct RedisOutbox {
    pub(crate) fence: Observed<RedisFence>,
    pub(crate) config: Arc<OutboxConfig>,
}

/// Your state change, as a Lua body run under the fence (see [`fence_redis::FencedScript`] for
/// the rules: `KEYS` are the keys you name, `ARGV` your arguments). Build it once and reuse it.
pub struct OutboxScript {
    script: FencedBody,
}

impl OutboxScript {
    /// Wraps a Lua body.
    pub fn new(lua: &str) -> Self {
        OutboxScript {
            script: scripts::transition(lua),
        }
    }

    /// `SET KEYS[1] ARGV[1]`: the state is one string value.
    pub fn set() -> Self {
        Self::new("return redis.call('SET', KEYS[1], ARGV[1])")
    }

    /// `HSET KEYS[1] ARGV[1] ARGV[2] ...`: the state is fields of one hash.
    pub fn hset() -> Self {
        Self::new("return redis.call('HSET', KEYS[1], unpack(ARGV))")
    }
}

impl fmt::Debug for OutboxScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboxScript")
            .field("script", &self.script)
            .finish()
    }
}

/// One fenced transition: the domain, token and operation id, the keys and arguments of the
/// state change, and the effects to record with it.
///
/// The operation id is required: it makes a retried transition a no-op (no second set of
/// entries) and it is part of every effect's [`IdempotencyKey`].
#[derive(Clone)]
pub struct RedisTransition {
    fencing: Fencing,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
    effects: Vec<Effect>,
}

impl RedisTransition {
    /// A transition of `domain` under `token`, identified by `op_id`.
    pub fn new(domain: Domain, token: FencingToken, op_id: OperationId) -> Self {
        RedisTransition {
            fencing: Fencing::new(domain, token).with_op_id(op_id),
            keys: Vec::new(),
            args: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// Adds a key of the domain by name (the next `KEYS[i]` of the state change).
    pub fn key(mut self, name: impl Into<String>) -> Self {
        self.keys.push(name.into());
        self
    }

    /// Adds an argument (the next `ARGV[i]` of the state change).
    pub fn arg(mut self, value: impl AsRef<[u8]>) -> Self {
        self.args.push(value.as_ref().to_vec());
        self
    }

    /// Adds an effect, delivered after the transition commits, in order.
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effects.push(effect);
        self
    }

    /// The idempotency keys its effects get, in order.
    pub fn keys_of_effects(&self) -> Result<Vec<IdempotencyKey>, InvalidInput> {
        IdempotencyKey::of_transition(&self.fencing, self.effects.len())
    }
}

fence_core::fenced_request!(
    RedisTransition,
    op_id_doc = "A transition always carries one: `new` takes it, and a retry with it records nothing again."
);

impl fmt::Debug for RedisTransition {
    // Arguments and payloads may be secret: only their counts are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTransition")
            .field("fencing", &self.fencing)
            .field("keys", &self.keys)
            .field("args", &self.args.len())
            .field("effects", &self.effects)
            .finish()
    }
}

/// What a transition recorded.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RedisRecorded {
    /// The token the transition carried (now the domain's high-water mark).
    pub token: FencingToken,
    /// The mark before the transition.
    pub previous_high_water_mark: Option<FencingToken>,
    /// The sequence numbers of the recorded entries (empty range when none).
    pub seqs: std::ops::RangeInclusive<u64>,
    /// Their idempotency keys, in order.
    pub keys: Vec<IdempotencyKey>,
    /// True when the op id had already run: nothing ran or was recorded again.
    pub duplicate: bool,
    /// What the state change returned (`Nil` for a duplicate).
    pub result: ScriptValue,
    /// Replicas that acknowledged the transition, when the fence waits for them (fewer than
    /// asked is [`FenceError::Unreplicated`], never a plain success).
    pub replicas_acknowledged: Option<u32>,
}

/// A run of the transition script, and whether the domain already had pending entries.
struct Ran {
    recorded: RedisRecorded,
    had_pending: bool,
    /// What `WAIT` answered, judged after the index hint is written.
    acks: fence_redis::ReplicaAcks,
}

impl fence_core::raw::OutcomeLabel for Ran {
    fn outcome_label(&self) -> &'static str {
        self.recorded.outcome_label()
    }
}

impl fence_core::raw::OutcomeLabel for RedisRecorded {
    fn outcome_label(&self) -> &'static str {
        fence_core::raw::replay_label(self.duplicate)
    }
}

impl RedisOutbox {
    /// An outbox on `fence` accepting the effect kinds in `kinds`, with default limits.
    pub fn new(fence: Observed<RedisFence>, kinds: EffectKinds) -> Self {
        Self::with_config(fence, OutboxConfig::new(kinds))
    }

    /// An outbox with explicit limits and partitioning.
    pub fn with_config(fence: Observed<RedisFence>, config: OutboxConfig) -> Self {
        RedisOutbox {
            fence,
            config: Arc::new(config),
        }
    }

    /// The fence underneath (for leases, claims and reads).
    pub fn fence(&self) -> &Observed<RedisFence> {
        &self.fence
    }

    /// The configuration.
    pub fn config(&self) -> &OutboxConfig {
        &self.config
    }

    /// Runs `script` under the fence and records the transition's effects in the same script.
    ///
    /// - A stale token: [`FenceError::Fenced`] inside [`OutboxError::Fence`]; nothing changed,
    ///   nothing recorded.
    /// - An op id that already ran: `duplicate`, with the first run's sequence numbers.
    /// - A lost reply: [`FenceError::Ambiguous`]; retry with the same op id, which is safe.
    /// - Unknown kinds, bad destinations, oversized payloads: refused before any I/O.
    pub async fn transition(
        &self,
        script: &OutboxScript,
        transition: &RedisTransition,
    ) -> Result<RedisRecorded, OutboxError> {
        self.check(transition)?;
        let recorded = observe(
            BACKEND,
            Operation::Write,
            transition.domain(),
            Some(transition.token()),
            self.run(script, transition),
        )
        .await?;
        let Ran {
            mut recorded,
            had_pending,
            acks,
        } = recorded;
        if !recorded.duplicate && !recorded.seqs.is_empty() && !had_pending {
            self.index(transition.domain()).await;
        }
        // After the hint: an unreplicated transition is applied on the primary, and its retry
        // (a duplicate) would not write the hint again.
        recorded.replicas_acknowledged = self
            .fence
            .replicas_acknowledged(transition.domain(), acks)
            .map_err(OutboxError::from)?;
        Ok(recorded)
    }

    fn check(&self, t: &RedisTransition) -> Result<(), OutboxError> {
        if let Some(name) = t.keys.iter().find(|name| name.starts_with("ob:")) {
            return Err(OutboxError::InvalidName {
                what: "transition key",
                value: name.clone(),
                reason: "names starting with `ob:` are reserved for the outbox",
            });
        }
        self.config.check_effects(t.domain(), &t.effects)
    }

    /// Runs the script; also says whether the domain already had pending entries.
    async fn run(&self, script: &OutboxScript, t: &RedisTransition) -> Result<Ran, FenceError> {
        let domain = t.domain();
        let effect_keys = t.keys_of_effects()?;
        let token_text = t.token().to_string();
        // The outbox's keys, then the user's; the fence adds its own in front.
        let mut call = ScriptCall::new(domain.clone(), t.token()).with_policy(t.policy());
        if let Some(op_id) = t.op_id() {
            call = call.with_op_id(op_id.clone());
        }
        let mut call = call
            .key(META)
            .key(ENTRIES)
            .arg(self.config.partition_of(domain).to_string())
            .arg(domain.as_str())
            .arg(t.effects.len().to_string())
            .arg(t.args.len().to_string());
        for name in &t.keys {
            call = call.key(name);
        }
        for arg in &t.args {
            call = call.arg(arg);
        }
        for (effect, key) in t.effects.iter().zip(&effect_keys) {
            call = call.arg(pack(
                &token_text,
                key.as_str(),
                effect.kind(),
                effect.destination(),
                effect.payload(),
            ));
        }
        let run = self.fence.run_body(&script.script, &call).await?;
        let (had_pending, result) = match &run.result {
            ScriptValue::Array(items) => (
                items.first().and_then(ScriptValue::as_str) == Some("1"),
                items.get(1).cloned().unwrap_or_default(),
            ),
            _ => (false, ScriptValue::Nil),
        };
        let (first, last) = run
            .outcome
            .split_once('|')
            .and_then(|(first, last)| Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?)))
            .ok_or_else(|| {
                corrupt(
                    domain,
                    format!("transition outcome `{}` is not `first|last`", run.outcome),
                )
            })?;
        Ok(Ran {
            recorded: RedisRecorded {
                token: t.token(),
                previous_high_water_mark: run.previous_high_water_mark,
                seqs: first..=last,
                keys: effect_keys,
                duplicate: run.duplicate,
                result,
                replicas_acknowledged: None,
            },
            had_pending,
            acks: run.acks,
        })
    }

    /// Adds the domain to its partition index: a hint, retried briefly. If it is lost, the
    /// relay's sweep finds the domain.
    pub(crate) async fn index(&self, domain: &Domain) {
        let key = self.index_key(self.config.partition_of(domain));
        for attempt in 0..3u64 {
            let mut cmd = redis::cmd("HINCRBY");
            cmd.arg(&key).arg(domain.as_str()).arg(1);
            match self.fence.query(&cmd).await {
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(domain = domain.as_str(), attempt, %error, "outbox index hint failed; the relay's sweep will find the domain");
                    tokio::time::sleep(std::time::Duration::from_millis(20 << attempt)).await;
                }
            }
        }
    }

    /// The partition index key.
    pub(crate) fn index_key(&self, partition: u16) -> String {
        format!("{}:outbox:{{p{partition}}}:index", self.fence.prefix())
    }

    /// Every entry of `domain` still kept: pending, delivered within the retention window,
    /// and dead letters, in order.
    pub async fn entries(
        &self,
        domain: &Domain,
    ) -> Result<Vec<fence_outbox::OutboxEntry>, OutboxError> {
        let keys = [
            self.fence.user_key(domain, META)?,
            self.fence.user_key(domain, ENTRIES)?,
        ];
        let value = self
            .fence
            .eval_script(&scripts::LIST, domain, false, &keys, &[])
            .await?;
        Ok(parse(domain, value)?.entries(domain)?)
    }
}

impl RedisOutbox {
    /// The dead letters of `domain`, in order, with their last errors.
    pub async fn dead_letters(
        &self,
        domain: &Domain,
    ) -> Result<Vec<fence_outbox::OutboxEntry>, OutboxError> {
        let mut entries = self.entries(domain).await?;
        entries.retain(OutboxEntry::is_dead_letter);
        Ok(entries)
    }

    /// Removes dead letter `seq` of `domain` once an operator has dealt with it (re-sent it by
    /// hand, or recorded a new transition). Returns false when `seq` is not a dead letter.
    pub async fn discard_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<bool, OutboxError> {
        Ok(self.on_entry(&scripts::DISCARD, domain, seq).await? == "1")
    }

    /// Re-drives dead letter `seq` of `domain` once an operator has dealt with its cause: its
    /// record (the same idempotency key, token and recording time) becomes a new pending
    /// entry after the domain's last one, so the relay delivers it again (a sink that saw the
    /// key before can deduplicate), and the dead letter goes. Returns the new entry's seq, or
    /// `None` when `seq` is not a dead letter.
    pub async fn redrive_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<Option<u64>, OutboxError> {
        let new_seq = self.on_entry(&scripts::REDRIVE, domain, seq).await?;
        if new_seq == "0" {
            return Ok(None);
        }
        // The partition's index lists the domain again, so a relay visits it.
        self.index(domain).await;
        new_seq.parse().map(Some).map_err(|_| {
            OutboxError::from(fence_core::FenceError::corrupt(
                "redis",
                domain,
                format!("re-drive answered seq `{new_seq}`"),
            ))
        })
    }

    /// Runs an operator's script on entry `seq` of `domain`; its one-word answer.
    async fn on_entry(
        &self,
        script: &fence_redis::unstable::RedisScript,
        domain: &Domain,
        seq: u64,
    ) -> Result<String, OutboxError> {
        let keys = [
            self.fence.user_key(domain, META)?,
            self.fence.user_key(domain, ENTRIES)?,
        ];
        let seq_text = seq.to_string();
        let value = self
            .fence
            .eval_script(script, domain, true, &keys, &[seq_text.as_bytes()])
            .await?;
        Ok(parse(domain, value)?.text(domain, 0)?)
    }
}

impl fmt::Debug for RedisOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOutbox")
            .field("fence", &self.fence)
            .field("config", &self.config)
            .finish()
    }
}
