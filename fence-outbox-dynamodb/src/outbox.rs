//! `DynamoDbOutbox`: effects written as items of the outbox table in the fenced transaction
//! that changes your items, and what operators do with dead letters.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{
    BackendErrorKind, Backoff, Domain, FenceError, InvalidInput, Observed, Operation, Transacted,
    TransactionRequest,
};
use fence_dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, Delete, GlobalSecondaryIndex,
    KeySchemaElement, KeyType, KeysAndAttributes, Projection, ProjectionType, Put,
    ScalarAttributeType, TransactWriteItem, Update,
};
use fence_dynamodb::aws_sdk_dynamodb::Client;
use fence_dynamodb::extension::{self, number, Expr, Item, Refusal, BACKEND};
use fence_dynamodb::{DynamoDb, DynamoDbFence, DynamoDbFenceError, MAX_TRANSACTION_ACTIONS};
use fence_outbox::{
    Effect, EffectKinds, IdempotencyKey, OutboxConfig, OutboxEntry, OutboxError, Recorded,
};

use crate::item::{attr, corrupt, decode_entry, entry_item, now_ms, text, Progress, PENDING_INDEX};

/// The most effects one transition records: DynamoDB's 100 actions per transaction, less the
/// fence's update of the domain's item and the outbox's of its progress item. Your own
/// actions in the same transition count against the same 98.
pub const MAX_EFFECTS: usize = MAX_TRANSACTION_ACTIONS - 1;

/// The largest payload: an entry is one item (DynamoDB's 400 KB), with room for its other
/// attributes. A transaction carries at most 4 MB in all.
pub const MAX_PAYLOAD_BYTES: usize = 350 * 1024;

/// The most bytes of one effect (payload, kind and destination): an entry is one item, whose
/// other attributes take the rest of DynamoDB's 400 KB.
const MAX_ENTRY_BYTES: usize = 390 * 1024;

/// The most bytes of effects one transition carries: a transaction carries at most 4 MB, the
/// fence's item and your actions included.
const MAX_TRANSITION_BYTES: usize = 3 * 1024 * 1024;

/// How many times a transition is tried again when a concurrent one numbered the domain's
/// entries first (and a re-drive, when the numbering moved on).
const NUMBERING_ATTEMPTS: u32 = 16;

/// The pause between those attempts: racing writers spread out.
const NUMBERING_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(5), Duration::from_millis(200));

/// A fenced outbox on DynamoDB: [`DynamoDbOutbox::transition`] writes your actions, the
/// fence's check of the token and one item per effect in one `TransactWriteItems`, so the
/// effects are recorded with your state change or not at all, and a stale holder records
/// nothing. The outbox's items live in a table of their own ([`DynamoDbOutbox::create_table`]:
/// fenced transactions refuse actions on the fence's table). The relay's side
/// ([`fence_outbox::OutboxStore`]) keeps per-domain order and fences its progress with its own
/// lease token in the same conditional writes. Cheap to clone.
#[derive(Clone)]
pub struct DynamoDbOutbox {
    pub(crate) fence: Observed<DynamoDbFence>,
    pub(crate) table: Arc<str>,
    pub(crate) config: Arc<OutboxConfig>,
}

impl DynamoDbOutbox {
    /// An outbox in `table` (not the fence's own) for `fence`'s domains, accepting `kinds`, with
    /// the default limits and one partition. No I/O.
    pub fn new(
        fence: Observed<DynamoDbFence>,
        table: impl Into<String>,
        kinds: EffectKinds,
    ) -> Result<Self, OutboxError> {
        Self::with_config(fence, table, OutboxConfig::new(kinds))
    }

    /// An outbox with explicit limits (at most [`MAX_EFFECTS`] effects of at most
    /// [`MAX_PAYLOAD_BYTES`] each) and partitioning. No I/O.
    pub fn with_config(
        fence: Observed<DynamoDbFence>,
        table: impl Into<String>,
        config: OutboxConfig,
    ) -> Result<Self, OutboxError> {
        let table = table.into();
        let dynamodb = fence.dynamodb();
        // The table name, checked by the same rule as the fence's.
        DynamoDb::new(dynamodb.client().clone(), &table, dynamodb.namespace())
            .map_err(FenceError::from)?;
        if table == dynamodb.table() {
            return Err(OutboxError::Configuration(format!(
                "the outbox needs a table of its own, not the fence's `{table}`: fenced transactions refuse actions on it"
            )));
        }
        let budget = config.max_effects.saturating_mul(config.max_payload_bytes);
        if config.max_effects > MAX_EFFECTS
            || config.max_payload_bytes > MAX_PAYLOAD_BYTES
            || budget > MAX_TRANSITION_BYTES
        {
            return Err(OutboxError::Configuration(format!(
                "a DynamoDB outbox records at most {MAX_EFFECTS} effects of at most {MAX_PAYLOAD_BYTES} bytes, {MAX_TRANSITION_BYTES} bytes in all, per transition (one transaction of at most 4 MB, one item each), configured {} of {}",
                config.max_effects, config.max_payload_bytes
            )));
        }
        Ok(DynamoDbOutbox {
            fence,
            table: table.into(),
            config: Arc::new(config),
        })
    }

    /// Creates the outbox's table (partition key `pk`, a string; the sparse index `pending` on
    /// `pend`, a number; on-demand billing) and waits until it is `ACTIVE`. An existing table
    /// of that name is an error.
    pub async fn create_table(&self) -> Result<(), OutboxError> {
        let built = || -> Result<_, fence_dynamodb::aws_sdk_dynamodb::error::BuildError> {
            let definition = |name: &str, kind| {
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(kind)
                    .build()
            };
            let hash = |name: &str| {
                KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(KeyType::Hash)
                    .build()
            };
            let index = GlobalSecondaryIndex::builder()
                .index_name(PENDING_INDEX)
                .key_schema(hash(attr::PENDING)?)
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::Include)
                        .non_key_attributes(attr::DOMAIN)
                        .non_key_attributes(attr::VER)
                        .build(),
                )
                .build()?;
            Ok((
                [
                    definition(attr::PK, ScalarAttributeType::S)?,
                    definition(attr::PENDING, ScalarAttributeType::N)?,
                ],
                hash(attr::PK)?,
                index,
            ))
        };
        let unexpected = |e: fence_dynamodb::aws_sdk_dynamodb::error::BuildError| {
            OutboxError::Configuration(format!("outbox table definition: {e}"))
        };
        let ([pk, pending], key, index) = built().map_err(unexpected)?;
        let request = self
            .client()
            .create_table()
            .table_name(&*self.table)
            .attribute_definitions(pk)
            .attribute_definitions(pending)
            .key_schema(key)
            .global_secondary_indexes(index)
            .billing_mode(BillingMode::PayPerRequest);
        extension::create_table(self.client(), request, &self.table).await?;
        Ok(())
    }

    /// The fence the outbox records under.
    pub fn fence(&self) -> &Observed<DynamoDbFence> {
        &self.fence
    }

    /// The outbox's table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The outbox's limits and partitioning.
    pub fn config(&self) -> &OutboxConfig {
        &self.config
    }

    pub(crate) fn client(&self) -> &Client {
        self.fence.dynamodb().client()
    }

    /// The key of `domain`'s progress item.
    pub(crate) fn progress_key(&self, domain: &Domain) -> Item {
        key(self.fence.dynamodb().item_key(domain))
    }

    /// The key of entry `seq` of `domain`.
    pub(crate) fn entry_key(&self, domain: &Domain, seq: u64) -> Item {
        key(format!("{}#{seq}", self.fence.dynamodb().item_key(domain)))
    }

    /// Records a transition: `actions` (your puts, updates, deletes and condition checks on
    /// your own tables), the fence's check of `request`'s token and one entry per effect, in
    /// one DynamoDB transaction: all of it, or none. `request` needs an op id: it is part of
    /// every effect's [`IdempotencyKey`], and a retried transition whose op id the fence
    /// remembers is a duplicate that writes nothing again. A stale token is `Fenced` and
    /// nothing is written. Effects are checked against the outbox's kinds and limits, and the
    /// actions counted (yours plus the effects at most [`MAX_EFFECTS`]), before any I/O.
    pub async fn transition(
        &self,
        request: &TransactionRequest,
        actions: Vec<TransactWriteItem>,
        effects: &[Effect],
    ) -> Result<Recorded, OutboxError> {
        let domain = request.domain();
        self.config.check_effects(domain, effects)?;
        let op_id = IdempotencyKey::op_id_of(domain, request.op_id())?;
        if actions.len() + effects.len() > MAX_EFFECTS {
            return Err(InvalidInput::Configuration(format!(
                "a transition on domain `{domain}` holds at most {MAX_EFFECTS} actions and effects together (one DynamoDB transaction), got {} and {}",
                actions.len(),
                effects.len()
            ))
            .into());
        }
        let sizes: Vec<usize> = effects
            .iter()
            .map(|e| e.payload().len() + e.kind().len() + e.destination().len())
            .collect();
        if sizes.iter().any(|&size| size > MAX_ENTRY_BYTES)
            || sizes.iter().sum::<usize>() > MAX_TRANSITION_BYTES
        {
            return Err(InvalidInput::Configuration(format!(
                "a transition on domain `{domain}` records at most {MAX_ENTRY_BYTES} bytes per effect and {MAX_TRANSITION_BYTES} in all (DynamoDB's item and transaction sizes), got {sizes:?}"
            ))
            .into());
        }
        let numbering_action = actions.len();
        let keys: Vec<IdempotencyKey> = (0..effects.len())
            .map(|index| IdempotencyKey::new(domain, request.token(), op_id, index))
            .collect();
        let partition = self.config.partition_of(domain);
        let mut attempt = 0;
        loop {
            if attempt > 0 {
                tokio::time::sleep(NUMBERING_BACKOFF.delay(attempt - 1)).await;
            }
            attempt += 1;
            let progress = self.progress(domain).await?;
            if let Some(stored) = progress.as_ref().filter(|p| p.part != partition) {
                return Err(OutboxError::Configuration(format!(
                    "the outbox lists domain `{domain}` in partition {}, this writer computes {partition}: writers and relays must agree on `partitions`",
                    stored.part
                )));
            }
            let last = progress.as_ref().map_or(0, |p| p.last);
            let mut all = actions.clone();
            let at = now_ms();
            if !effects.is_empty() {
                all.push(self.numbering(domain, progress.as_ref(), partition, effects.len())?);
                for (offset, (effect, key)) in (1..).zip(effects.iter().zip(&keys)) {
                    let seq = last + offset;
                    let mut item =
                        entry_item(seq, key, op_id.as_str(), effect, request.token(), at);
                    item.extend(self.entry_key(domain, seq));
                    let mut expr = Expr::default();
                    let pk = expr.name(attr::PK);
                    let put = Put::builder()
                        .table_name(&*self.table)
                        .set_item(Some(item))
                        .condition_expression(format!("attribute_not_exists({pk})"))
                        .set_expression_attribute_names(expr.names())
                        .build()
                        .map_err(|e| unexpected(domain, e))?;
                    all.push(TransactWriteItem::builder().put(put).build());
                }
            }
            // The token names what the actions were built from: the numbering and the time.
            let state = format!("{last} {at}");
            let sent = extension::transact_naming_state(&self.fence, request, all, &state).await;
            return match sent {
                Ok(Transacted::Committed {
                    previous_high_water_mark,
                    ..
                }) => Ok(Recorded::new(keys, false, previous_high_water_mark)),
                Ok(Transacted::Duplicate {
                    previous_high_water_mark,
                }) => Ok(Recorded::new(Vec::new(), true, previous_high_water_mark)),
                Err(error) => match condition_failed_at(&error) {
                    Some(action) if action == numbering_action && attempt < NUMBERING_ATTEMPTS => {
                        continue;
                    }
                    Some(action) if action == numbering_action => {
                        Err(contention(domain, NUMBERING_ATTEMPTS).into())
                    }
                    // An entry's number was taken though the numbering said it was free.
                    Some(action) if action > numbering_action => Err(corrupt(
                        domain,
                        format!(
                            "entry {} exists beyond the last one numbered, {last}",
                            last + (action - numbering_action) as u64
                        ),
                    )
                    .into()),
                    _ => Err(error.into()),
                },
            };
        }
    }

    /// The update of `domain`'s progress item that numbers `count` new entries after the
    /// last one `progress` read, refused if another transition numbered some meanwhile.
    fn numbering(
        &self,
        domain: &Domain,
        progress: Option<&Progress>,
        partition: u16,
        count: usize,
    ) -> Result<TransactWriteItem, OutboxError> {
        let count = count as u64;
        let mut expr = Expr::default();
        let (last, pend, ver, part) = (
            expr.name(attr::LAST),
            expr.name(attr::PENDING),
            expr.name(attr::VER),
            expr.name(attr::PART),
        );
        let p = expr.value("part", number(u64::from(partition)));
        let (condition, update) = match progress {
            None => {
                let pk = expr.name(attr::PK);
                let (dom, done, kept) = (
                    expr.name(attr::DOMAIN),
                    expr.name(attr::DONE),
                    expr.name(attr::KEPT),
                );
                let d = expr.value("dom", text(domain.as_str()));
                let n = expr.value("n", number(count));
                let zero = expr.value("zero", number(0));
                let one = expr.value("one", number(1));
                (
                    format!("attribute_not_exists({pk})"),
                    format!(
                        "SET {dom} = {d}, {part} = {p}, {last} = {n}, {done} = {zero}, {kept} = {one}, {ver} = {one}, {pend} = {p}"
                    ),
                )
            }
            Some(progress) => {
                let next = progress
                    .last
                    .checked_add(count)
                    .ok_or_else(|| corrupt(domain, format!("numbering at {}", progress.last)))?;
                let known = expr.value("last", number(progress.last));
                let next = expr.value("next", number(next));
                let one = expr.value("one", number(1));
                (
                    format!("{last} = {known} AND {part} = {p}"),
                    format!("SET {last} = {next}, {pend} = {p} ADD {ver} {one}"),
                )
            }
        };
        let update = Update::builder()
            .table_name(&*self.table)
            .set_key(Some(self.progress_key(domain)))
            .condition_expression(condition)
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .build()
            .map_err(|e| unexpected(domain, e))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// `domain`'s progress (strongly consistent), `None` before its first transition.
    pub(crate) async fn progress(&self, domain: &Domain) -> Result<Option<Progress>, FenceError> {
        let output = self
            .client()
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.progress_key(domain)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| extension::failure(e, &self.table, domain, Operation::Read, false))?;
        Progress::decode(domain, output.item())
    }

    /// The entries of `domain` numbered `seqs` that the table still holds, in order
    /// (strongly consistent reads).
    pub(crate) async fn fetch(
        &self,
        domain: &Domain,
        seqs: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<OutboxEntry>, FenceError> {
        let seqs: Vec<u64> = seqs.into_iter().collect();
        let mut entries = Vec::with_capacity(seqs.len());
        // BatchGetItem reads at most 100 keys.
        for chunk in seqs.chunks(100) {
            let mut keys: Vec<Item> = chunk.iter().map(|&s| self.entry_key(domain, s)).collect();
            for round in 0.. {
                if keys.is_empty() {
                    break;
                }
                if round == 8 {
                    return Err(FenceError::backend(
                        BACKEND,
                        BackendErrorKind::Unavailable,
                        Some(domain),
                        DynamoDbFenceError::Throttled {
                            code: "UnprocessedKeys".into(),
                        },
                    ));
                }
                let wanted = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| unexpected(domain, e))?;
                let output = self
                    .client()
                    .batch_get_item()
                    .request_items(&*self.table, wanted)
                    .send()
                    .await
                    .map_err(|e| {
                        extension::failure(e, &self.table, domain, Operation::Read, false)
                    })?;
                for item in output
                    .responses()
                    .and_then(|r| r.get(&*self.table))
                    .into_iter()
                    .flatten()
                {
                    // The number the key names: `decode_entry` checks the item's own against it.
                    let seq = item
                        .get(attr::PK)
                        .and_then(|pk| pk.as_s().ok())
                        .and_then(|pk| pk.rsplit_once('#'))
                        .and_then(|(_, seq)| seq.parse::<u64>().ok())
                        .filter(|seq| chunk.contains(seq))
                        .ok_or_else(|| corrupt(domain, "an entry under a key not asked for"))?;
                    entries.push(decode_entry(domain, seq, item)?);
                }
                keys = output
                    .unprocessed_keys()
                    .and_then(|u| u.get(&*self.table))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
                if !keys.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20 << round)).await;
                }
            }
        }
        entries.sort_by_key(|e| e.seq);
        Ok(entries)
    }

    /// Every entry of `domain` still kept (pending, delivered within retention, dead letters),
    /// in order: for operators and tests.
    pub async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        let Some(progress) = self.progress(domain).await? else {
            return Ok(Vec::new());
        };
        // Dead letters below `kept` (the purge moves past them) are listed on the progress item.
        let below = progress.dead.range(..progress.kept).copied();
        Ok(self
            .fetch(domain, below.chain(progress.kept..=progress.last))
            .await?)
    }

    /// The dead letters of `domain`, in order: entries given up on, kept until an operator acts.
    pub async fn dead_letters(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        let mut entries = self.entries(domain).await?;
        entries.retain(OutboxEntry::is_dead_letter);
        Ok(entries)
    }

    /// Removes dead letter `seq` of `domain` once an operator has dealt with it. Returns false
    /// when `seq` is not a dead letter.
    pub async fn discard_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<bool, OutboxError> {
        let actions = vec![
            self.delete_dead_letter(domain, seq)?,
            self.forget_dead_letter(domain, seq, None)?,
        ];
        match self.send_dead_letter_step(domain, actions).await? {
            Step::Done => Ok(true),
            Step::Refused(0) => Ok(false),
            Step::Refused(_) => {
                Err(corrupt(domain, format!("dead letter {seq} without progress")).into())
            }
            Step::Retry => Err(contention(domain, 1).into()),
        }
    }

    /// The deletion of dead letter `seq` (refused when it is not one).
    fn delete_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<TransactWriteItem, OutboxError> {
        let mut expr = Expr::default();
        let st = expr.name(attr::STATUS);
        let x = expr.value("dead", text("x"));
        let delete = Delete::builder()
            .table_name(&*self.table)
            .set_key(Some(self.entry_key(domain, seq)))
            .condition_expression(format!("{st} = {x}"))
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .build()
            .map_err(|e| unexpected(domain, e))?;
        Ok(TransactWriteItem::builder().delete(delete).build())
    }

    /// The progress item's update that drops `seq` from the dead letters (`renumber`: and
    /// numbers one more entry after `last` as read).
    fn forget_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
        renumber: Option<&Progress>,
    ) -> Result<TransactWriteItem, OutboxError> {
        let mut expr = Expr::default();
        let pk = expr.name(attr::PK);
        let dead = expr.name(attr::DEAD);
        let gone = expr.value("gone", AttributeValue::Ns(vec![seq.to_string()]));
        let (condition, update) = match renumber {
            None => (
                format!("attribute_exists({pk})"),
                format!("DELETE {dead} {gone}"),
            ),
            Some(progress) => {
                let new_seq = progress
                    .last
                    .checked_add(1)
                    .ok_or_else(|| corrupt(domain, format!("numbering at {}", progress.last)))?;
                let (last, pend, ver) = (
                    expr.name(attr::LAST),
                    expr.name(attr::PENDING),
                    expr.name(attr::VER),
                );
                let known = expr.value("last", number(progress.last));
                let next = expr.value("next", number(new_seq));
                let part = expr.value("part", number(u64::from(progress.part)));
                let one = expr.value("one", number(1));
                (
                    format!("attribute_exists({pk}) AND {last} = {known}"),
                    format!(
                        "SET {last} = {next}, {pend} = {part} ADD {ver} {one} DELETE {dead} {gone}"
                    ),
                )
            }
        };
        let update = Update::builder()
            .table_name(&*self.table)
            .set_key(Some(self.progress_key(domain)))
            .condition_expression(condition)
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .build()
            .map_err(|e| unexpected(domain, e))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Sends an operator's step on a dead letter (one transaction).
    async fn send_dead_letter_step(
        &self,
        domain: &Domain,
        actions: Vec<TransactWriteItem>,
    ) -> Result<Step, FenceError> {
        let sent = self
            .client()
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await;
        let Err(error) = sent else {
            return Ok(Step::Done);
        };
        match extension::transaction_refusal(error, &self.table, domain, Operation::Write) {
            Refusal::Cancelled(reasons) => {
                if let Some(index) = reasons
                    .iter()
                    .position(extension::CancelReason::condition_failed)
                {
                    return Ok(Step::Refused(index));
                }
                let error = extension::cancellation(domain, &reasons);
                if error.is_retryable()
                    || error.backend_kind() == Some(BackendErrorKind::Contention)
                {
                    Ok(Step::Retry)
                } else {
                    Err(error)
                }
            }
            Refusal::Failed(error) => Err(error),
            other => Err(corrupt(domain, format!("a transaction answered {other:?}"))),
        }
    }

    /// Re-drives dead letter `seq` of `domain` once an operator has dealt with its cause: in
    /// one transaction it becomes a new pending entry after the domain's last one, with the
    /// same idempotency key, token and recording time (a sink that saw the key before can
    /// deduplicate). Returns the new entry's seq, or `None` when `seq` is not a dead letter.
    pub async fn redrive_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<Option<u64>, OutboxError> {
        for attempt in 0..NUMBERING_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(NUMBERING_BACKOFF.delay(attempt - 1)).await;
            }
            let Some(progress) = self.progress(domain).await? else {
                return Ok(None);
            };
            let found = self
                .client()
                .get_item()
                .table_name(&*self.table)
                .set_key(Some(self.entry_key(domain, seq)))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| extension::failure(e, &self.table, domain, Operation::Read, false))?;
            let Some(mut item) = found.item else {
                return Ok(None);
            };
            if !decode_entry(domain, seq, &item)?.is_dead_letter() {
                return Ok(None);
            }
            let new_seq = progress.last + 1; // checked by forget_dead_letter
            for stale in [attr::ERROR, attr::SETTLED_AT, attr::SETTLED_BY] {
                item.remove(stale);
            }
            item.insert(attr::SEQ.into(), number(new_seq));
            item.insert(attr::STATUS.into(), text("p"));
            item.insert(attr::ATTEMPTS.into(), number(0));
            item.extend(self.entry_key(domain, new_seq));
            let renumber = self.forget_dead_letter(domain, seq, Some(&progress))?;
            let mut expr = Expr::default();
            let pk = expr.name(attr::PK);
            let put = Put::builder()
                .table_name(&*self.table)
                .set_item(Some(item))
                .condition_expression(format!("attribute_not_exists({pk})"))
                .set_expression_attribute_names(expr.names())
                .build()
                .map_err(|e| unexpected(domain, e))?;
            let actions = vec![
                renumber,
                TransactWriteItem::builder().put(put).build(),
                self.delete_dead_letter(domain, seq)?,
            ];
            match self.send_dead_letter_step(domain, actions).await? {
                Step::Done => return Ok(Some(new_seq)),
                // The numbering moved on (a transition), or the dead letter went (another
                // operator): read again.
                Step::Refused(0 | 2) | Step::Retry => continue,
                Step::Refused(_) => {
                    return Err(corrupt(
                        domain,
                        format!("entry {new_seq} exists beyond the last one numbered"),
                    )
                    .into())
                }
            }
        }
        Err(contention(domain, NUMBERING_ATTEMPTS).into())
    }
}

/// How an operator's step on a dead letter ended.
enum Step {
    Done,
    /// The condition of this action (its index) was false: nothing was written.
    Refused(usize),
    /// A conflict or throttling: nothing was written, and a retry can help.
    Retry,
}

/// Concurrent writers changed the domain's numbering under every attempt.
fn contention(domain: &Domain, attempts: u32) -> FenceError {
    FenceError::backend(
        BACKEND,
        BackendErrorKind::Contention,
        Some(domain),
        DynamoDbFenceError::Contention { attempts },
    )
}

/// An item key.
fn key(pk: String) -> Item {
    Item::from([(attr::PK.to_owned(), text(pk))])
}

/// A request the SDK refused to build: a defect of this crate, reported as corrupt state.
pub(crate) fn unexpected(domain: &Domain, error: impl fmt::Display) -> FenceError {
    corrupt(domain, format!("a request could not be built: {error}"))
}

/// The index of the action of a fenced transaction whose own condition cancelled it, if that
/// is what `error` says.
fn condition_failed_at(error: &FenceError) -> Option<usize> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(DynamoDbFenceError::ActionCancelled { action, code, .. }) =
            current.downcast_ref::<DynamoDbFenceError>()
        {
            return (code == "ConditionalCheckFailed").then_some(*action);
        }
        source = current.source();
    }
    None
}

impl fmt::Debug for DynamoDbOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbOutbox")
            .field("table", &self.table)
            .field("fence", &*self.fence)
            .field("config", &self.config)
            .finish()
    }
}
