//! `KafkaOutbox`: fenced transactional appends that carry effects.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use fence_core::{
    AppendOutcome, AppendRequest, Domain, FenceError, FencedLog, Fencing, FencingToken,
    InvalidInput, Observed, OperationId, Record,
};
use fence_kafka::KafkaFence;

use crate::{DESTINATION_HEADER, KEY_HEADER, KIND_HEADER, PROGRESS_HEADER};
use fence_outbox::IdempotencyKey;
use fence_outbox::OutboxConfig;
use fence_outbox::OutboxError;
use fence_outbox::{Effect, EffectKinds};

/// A fenced outbox on Kafka: [`KafkaOutbox::transition`] appends your state records and the
/// effect records in one producer transaction under the domain's fencing token.
#[derive(Clone)]
pub struct KafkaOutbox {
    pub(crate) fence: Observed<KafkaFence>,
    pub(crate) config: Arc<OutboxConfig>,
}

/// One transition: state records plus effects, under a token and a required op id.
#[derive(Clone)]
pub struct KafkaTransition {
    fencing: Fencing,
    records: Vec<Record>,
    effects: Vec<Effect>,
}

impl KafkaTransition {
    /// A transition of `domain` under `token`, identified by `op_id`.
    pub fn new(domain: Domain, token: FencingToken, op_id: OperationId) -> Self {
        KafkaTransition {
            fencing: Fencing::new(domain, token).with_op_id(op_id),
            records: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// Adds a state record.
    pub fn record(mut self, record: Record) -> Self {
        self.records.push(record);
        self
    }

    /// Adds an effect.
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
    KafkaTransition,
    op_id_doc = "A transition always carries one: `new` takes it, and a retry with it appends nothing again."
);

impl fmt::Debug for KafkaTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaTransition")
            .field("fencing", &self.fencing)
            .field("records", &self.records.len())
            .field("effects", &self.effects)
            .finish()
    }
}

/// What a Kafka transition recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KafkaRecorded {
    /// The token the transition carried.
    pub token: FencingToken,
    /// The mark before it.
    pub previous_high_water_mark: Option<FencingToken>,
    /// The effects' idempotency keys, in order.
    pub keys: Vec<IdempotencyKey>,
    /// True when the op id had already been appended: nothing was appended again.
    pub duplicate: bool,
}

impl KafkaOutbox {
    /// An outbox on `fence` accepting `kinds`, with default limits.
    pub fn new(fence: Observed<KafkaFence>, kinds: EffectKinds) -> Self {
        Self::with_config(fence, OutboxConfig::new(kinds))
    }

    /// An outbox with explicit limits and partitioning.
    pub fn with_config(fence: Observed<KafkaFence>, config: OutboxConfig) -> Self {
        KafkaOutbox {
            fence,
            config: Arc::new(config),
        }
    }

    /// The fence underneath.
    pub fn fence(&self) -> &Observed<KafkaFence> {
        &self.fence
    }

    /// The configuration.
    pub fn config(&self) -> &OutboxConfig {
        &self.config
    }

    /// Appends the state records and the effects in one fenced transaction.
    ///
    /// A stale token is [`fence_core::FenceError::Fenced`] and nothing is committed; an op id
    /// that already ran is `duplicate`; unknown kinds, bad destinations and oversized payloads
    /// are refused before any I/O, and so is a fence with [`fence_kafka::Partitioning::RecordKey`]
    /// (an outbox orders a domain's entries by their place in its one partition).
    pub async fn transition(&self, t: &KafkaTransition) -> Result<KafkaRecorded, OutboxError> {
        // Entries are ordered by their offset in the domain's one partition.
        if matches!(
            self.fence.partitioning(),
            fence_kafka::Partitioning::RecordKey
        ) {
            return Err(fence_core::FenceError::from(fence_core::InvalidInput::Configuration(
                "the Kafka outbox needs a domain's records in one partition: record-key partitioning spreads them".into(),
            ))
            .into());
        }
        self.config.check_effects(t.domain(), &t.effects)?;
        // A state record posing as an effect (or a progress mark) would be delivered.
        let reserved = [KEY_HEADER, KIND_HEADER, DESTINATION_HEADER, PROGRESS_HEADER];
        if let Some((name, _)) = t
            .records
            .iter()
            .flat_map(|record| record.headers.iter())
            .find(|(name, _)| reserved.contains(&name.as_str()))
        {
            return Err(OutboxError::InvalidName {
                what: "state record header",
                value: name.clone(),
                reason: "names of the outbox's own headers are reserved",
            });
        }
        let keys = t.keys_of_effects().map_err(FenceError::from)?;
        let mut records = t.records.clone();
        for (effect, key) in t.effects.iter().zip(&keys) {
            records.push(
                Record::new(effect.payload().clone())
                    .with_key(Bytes::copy_from_slice(key.as_str().as_bytes()))
                    .with_header(KEY_HEADER, Bytes::copy_from_slice(key.as_str().as_bytes()))
                    .with_header(
                        KIND_HEADER,
                        Bytes::copy_from_slice(effect.kind().as_bytes()),
                    )
                    .with_header(
                        DESTINATION_HEADER,
                        Bytes::copy_from_slice(effect.destination().as_bytes()),
                    ),
            );
        }
        let mut request =
            AppendRequest::new(t.domain().clone(), t.token(), records).with_policy(t.policy());
        if let Some(op_id) = t.op_id() {
            request = request.with_op_id(op_id.clone());
        }
        let (appended, duplicate) = match self.fence.append(&request).await? {
            AppendOutcome::Appended(a) => (a, false),
            AppendOutcome::Duplicate(a) => (a, true),
            _ => {
                return Err(OutboxError::Fence(FenceError::unsupported(
                    "kafka",
                    "an append outcome this version of fence-outbox does not know",
                )))
            }
        };
        Ok(KafkaRecorded {
            token: t.token(),
            previous_high_water_mark: appended.previous_high_water_mark,
            keys,
            duplicate,
        })
    }
}

impl fmt::Debug for KafkaOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaOutbox")
            .field("fence", &self.fence)
            .field("config", &self.config)
            .finish()
    }
}
