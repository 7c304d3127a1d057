//! The relay's side of the DynamoDB outbox: every step is one conditional write (or one
//! transaction with the entry) on the domain's progress item, refused for a relay token older
//! than the newest one seen there; the candidates are a query of the sparse `pending` index.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Domain, EqualTokenPolicy, FenceError, FencingToken, Operation};
use fence_dynamodb::aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use fence_dynamodb::extension::{
    self, count_of, number, CancelReason, Expr, Item, Refusal, BACKEND,
};
use fence_outbox::{
    verdict, Candidate, EntryStatus, OutboxEntry, OutboxError, OutboxStore, Purged, Settlement,
};

use crate::item::{attr, corrupt, now_ms, text, Progress, PENDING_INDEX};
use crate::outbox::unexpected;
use crate::DynamoDbOutbox;

/// The most entries one purge visits.
const PURGE_BATCH: u64 = 200;

impl DynamoDbOutbox {
    /// The update of `domain`'s progress item that fences relay step `relay`: the item exists,
    /// no newer relay stepped there (fence-dynamodb's rule, same-owner policy: a relay
    /// retries its own steps) and, for a `head`, it is still the head; records `relay`, and
    /// `done` = the head when `settles`.
    fn relay_step(
        &self,
        relay: FencingToken,
        head: Option<(u64, Settles)>,
    ) -> (String, String, Expr) {
        let mut expr = Expr::default();
        let pk = expr.name(attr::PK);
        let admits = expr.admits_on(attr::RELAY, relay, EqualTokenPolicy::SameOwner);
        let relay_name = expr.name(attr::RELAY);
        let relay_value = expr.value("relay", number(relay.get()));
        let mut condition = format!("attribute_exists({pk}) AND {admits}");
        let mut update = format!("SET {relay_name} = {relay_value}");
        if let Some((seq, settles)) = head {
            let (done, last) = (expr.name(attr::DONE), expr.name(attr::LAST));
            let before = expr.value("before", number(seq.saturating_sub(1)));
            let head = expr.value("head", number(seq));
            condition.push_str(&format!(" AND {done} = {before} AND {last} >= {head}"));
            if settles != Settles::No {
                update.push_str(&format!(", {done} = {head}"));
            }
            if settles == Settles::DeadLetter {
                // Listed, so that purges move past it and `entries` still finds it.
                let dead = expr.name(attr::DEAD);
                let this = expr.value("dead", AttributeValue::Ns(vec![seq.to_string()]));
                update.push_str(&format!(" ADD {dead} {this}"));
            }
        }
        (condition, update, expr)
    }

    /// A head step (begin or settle): the progress item's fenced update and `entry`, the
    /// entry's update or check, in one transaction. `Ok(false)`: `seq` is no longer the head.
    async fn head_step(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settles: Settles,
        entry: TransactWriteItem,
    ) -> Result<bool, OutboxError> {
        let (condition, update, expr) = self.relay_step(relay, Some((seq, settles)));
        let step = Update::builder()
            .table_name(self.table())
            .set_key(Some(self.progress_key(domain)))
            .condition_expression(condition)
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| unexpected(domain, e))?;
        let sent = self
            .client()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(step).build())
            .transact_items(entry)
            .send()
            .await;
        let Err(error) = sent else {
            return Ok(true);
        };
        match extension::transaction_refusal(error, self.table(), domain, Operation::Write) {
            Refusal::Cancelled(reasons) => match &reasons[..] {
                [progress, _] if progress.condition_failed() => {
                    self.not_admitted(domain, relay, progress.item.as_ref())?;
                    Ok(false)
                }
                [_, entry] if entry.condition_failed() => Err(corrupt(
                    domain,
                    format!("head entry {seq} is missing or already settled"),
                )
                .into()),
                reasons => Err(extension::cancellation(domain, reasons).into()),
            },
            Refusal::Failed(error) => Err(error.into()),
            other => Err(corrupt(domain, format!("a transaction answered {other:?}")).into()),
        }
    }

    /// Why a relay step's condition failed on `item` (the progress as it is now): a newer relay
    /// stepped there (`Fenced`), or it was not the head (`Ok`).
    fn not_admitted(
        &self,
        domain: &Domain,
        relay: FencingToken,
        item: Option<&Item>,
    ) -> Result<(), FenceError> {
        match Progress::decode(domain, item)? {
            Some(progress) => verdict::relay_may_step(domain, progress.relay, relay),
            None => Ok(()),
        }
    }

    /// The entry's update for a head step.
    fn entry_update(
        &self,
        domain: &Domain,
        seq: u64,
        update: String,
        mut expr: Expr,
    ) -> Result<TransactWriteItem, FenceError> {
        let st = expr.name(attr::STATUS);
        let p = expr.value("pending", text("p"));
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(self.entry_key(domain, seq)))
            .condition_expression(format!("{st} = {p}"))
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .build()
            .map_err(|e| unexpected(domain, e))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }
}

/// What a head step records on the progress item besides the relay token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settles {
    /// Nothing (a begin, or a retry's failure).
    No,
    /// `done` moves to the head.
    Delivered,
    /// `done` moves to the head, which joins the dead letters.
    DeadLetter,
}

#[async_trait]
impl OutboxStore for DynamoDbOutbox {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn candidates(&self, partition: u16, sweep: bool) -> Result<Vec<Candidate>, OutboxError> {
        let listing = Domain::new(format!("fence-outbox-partition-{partition}"))?;
        let failed = |e| extension::failure(e, self.table(), &listing, Operation::Read, false);
        let part = number(u64::from(partition));
        // Domain → version, each domain once.
        let mut found: BTreeMap<String, String> = BTreeMap::new();
        let mut collect = |items: &[Item]| -> Result<(), FenceError> {
            for item in items {
                let (Some(dom), Some(ver)) =
                    (item.get(attr::DOMAIN), count_of(item.get(attr::VER)))
                else {
                    return Err(corrupt(
                        &listing,
                        "a progress item without domain or version",
                    ));
                };
                let dom = dom
                    .as_s()
                    .map_err(|_| corrupt(&listing, "a domain that is not a string"))?;
                found.insert(dom.clone(), ver.to_string());
            }
            Ok(())
        };
        let mut start = None;
        loop {
            let mut expr = Expr::default();
            let pend = expr.name(attr::PENDING);
            let p = expr.value("part", part.clone());
            let page = self
                .client()
                .query()
                .table_name(self.table())
                .index_name(PENDING_INDEX)
                .key_condition_expression(format!("{pend} = {p}"))
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(failed)?;
            collect(page.items())?;
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        // The sweep reads the whole table: domains the index lags on, and domains that only
        // keep settled entries (to purge them).
        if sweep {
            loop {
                let mut expr = Expr::default();
                let (dom, part_name, done, last, kept, ver) = (
                    expr.name(attr::DOMAIN),
                    expr.name(attr::PART),
                    expr.name(attr::DONE),
                    expr.name(attr::LAST),
                    expr.name(attr::KEPT),
                    expr.name(attr::VER),
                );
                let p = expr.value("part", part.clone());
                let page = self
                .client()
                .scan()
                .table_name(self.table())
                .filter_expression(format!(
                    "attribute_exists({dom}) AND {part_name} = {p} AND ({done} < {last} OR {kept} <= {done})"
                ))
                .projection_expression(format!("{dom}, {ver}"))
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| extension::failure(e, self.table(), &listing, Operation::Read, false))?;
                collect(page.items())?;
                start = page.last_evaluated_key().cloned();
                if start.is_none() {
                    break;
                }
            }
        }
        Ok(Candidate::listed(found))
    }

    async fn pending(
        &self,
        domain: &Domain,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let limit = u64::try_from(limit.max(1)).unwrap_or(u64::MAX);
        let mut read = self.progress(domain).await?;
        loop {
            let Some(progress) = read else {
                return Ok(Vec::new());
            };
            if progress.done == progress.last {
                return Ok(Vec::new());
            }
            let end = progress.last.min(progress.done.saturating_add(limit));
            let entries = self.fetch(domain, progress.done + 1..=end).await?;
            let numbered = entries.iter().map(|e| e.seq).eq(progress.done + 1..=end);
            let pending = entries
                .iter()
                .all(|e| matches!(e.status, EntryStatus::Pending { .. }));
            if numbered && pending {
                return Ok(entries);
            }
            // Another relay settled the head between the two reads: read again. The same
            // progress over entries that are not all there and pending is damage.
            let now = self.progress(domain).await?;
            if now.as_ref().map(|p| (p.done, p.last)) == Some((progress.done, progress.last)) {
                return Err(corrupt(
                    domain,
                    format!(
                        "entries {}..={end} are not all there and pending",
                        progress.done + 1
                    ),
                )
                .into());
            }
            read = now;
        }
    }

    async fn begin(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
    ) -> Result<Option<u32>, OutboxError> {
        if seq == 0 {
            return Ok(None);
        }
        let mut expr = Expr::default();
        let att = expr.name(attr::ATTEMPTS);
        let one = expr.value("one", number(1));
        let entry = self.entry_update(domain, seq, format!("ADD {att} {one}"), expr)?;
        if !self
            .head_step(domain, relay, seq, Settles::No, entry)
            .await?
        {
            return Ok(None);
        }
        // The count this step raised (a newer relay's begin may have raised it since: the
        // attempt limit counts both).
        let found = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(self.entry_key(domain, seq)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| extension::failure(e, self.table(), domain, Operation::Read, false))?;
        let attempts = count_of(found.item().and_then(|i| i.get(attr::ATTEMPTS)))
            .and_then(|a| u32::try_from(a).ok())
            .ok_or_else(|| corrupt(domain, format!("entry {seq}'s attempts")))?;
        Ok(Some(attempts))
    }

    async fn settle(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settlement: &Settlement,
    ) -> Result<bool, OutboxError> {
        if seq == 0 {
            return Ok(false);
        }
        let (code, error) = settlement.code();
        let settles = match code {
            'd' => Settles::Delivered,
            'x' => Settles::DeadLetter,
            _ => Settles::No,
        };
        let settled = settles != Settles::No;
        let mut expr = Expr::default();
        let mut sets = Vec::new();
        if settled {
            let (st, sat, sby) = (
                expr.name(attr::STATUS),
                expr.name(attr::SETTLED_AT),
                expr.name(attr::SETTLED_BY),
            );
            let c = expr.value("code", text(code.to_string()));
            let now = expr.value("now", number(now_ms()));
            let by = expr.value("by", number(relay.get()));
            sets.push(format!("{st} = {c}, {sat} = {now}, {sby} = {by}"));
        }
        if !error.is_empty() {
            let err = expr.name(attr::ERROR);
            let e = expr.value("error", text(error));
            sets.push(format!("{err} = {e}"));
        }
        let entry = if sets.is_empty() {
            // Nothing to record on the entry: only check it is still pending.
            let st = expr.name(attr::STATUS);
            let p = expr.value("pending", text("p"));
            let check = ConditionCheck::builder()
                .table_name(self.table())
                .set_key(Some(self.entry_key(domain, seq)))
                .condition_expression(format!("{st} = {p}"))
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .build()
                .map_err(|e| unexpected(domain, e))?;
            TransactWriteItem::builder().condition_check(check).build()
        } else {
            self.entry_update(domain, seq, format!("SET {}", sets.join(", ")), expr)?
        };
        self.head_step(domain, relay, seq, settles, entry).await
    }

    async fn purge(
        &self,
        candidate: &Candidate,
        relay: FencingToken,
        retention: Duration,
        drained: bool,
    ) -> Result<Purged, OutboxError> {
        let domain = &candidate.domain;
        let (condition, update, expr) = self.relay_step(relay, None);
        let stepped = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(self.progress_key(domain)))
            .condition_expression(condition)
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let progress = match stepped {
            Ok(output) => Progress::decode(domain, output.attributes())?,
            Err(error) => {
                match extension::update_refusal(error, self.table(), domain, Operation::Write) {
                    Refusal::Condition(item) => {
                        self.not_admitted(domain, relay, item.as_ref())?;
                        None
                    }
                    Refusal::Failed(error) => return Err(error.into()),
                    other => {
                        return Err(corrupt(domain, format!("an update answered {other:?}")).into())
                    }
                }
            }
        };
        let Some(progress) = progress else {
            return Ok(Purged::new(0));
        };
        let end = progress
            .done
            .min(progress.kept.saturating_add(PURGE_BATCH - 1));
        let mut removed = 0;
        let mut kept = progress.kept;
        if progress.kept <= end {
            let cut =
                now_ms().saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
            let entries = self.fetch(domain, progress.kept..=end).await?;
            let expired: Vec<u64> = entries
                .iter()
                .filter(
                    |e| matches!(e.status, EntryStatus::Delivered { at_ms, .. } if at_ms <= cut),
                )
                .map(|e| e.seq)
                .collect();
            let mut deleted = BTreeSet::new();
            for batch in expired.chunks(MAX_DELETES) {
                if !self.delete_delivered(domain, relay, batch, cut).await? {
                    break;
                }
                deleted.extend(batch.iter().copied());
            }
            removed = deleted.len();
            // Every entry below `kept` is gone or a listed dead letter: it moves past those in
            // a row (a delivered entry within retention stops it).
            let staying: BTreeSet<u64> = entries
                .iter()
                .map(|e| e.seq)
                .filter(|seq| !deleted.contains(seq) && !progress.dead.contains(seq))
                .collect();
            while kept <= end && !staying.contains(&kept) {
                kept += 1;
            }
        }
        let mut expr = Expr::default();
        // The tidy-up is a relay step too: refused to a relay older than the newest.
        let mut conditions = vec![expr.admits_on(attr::RELAY, relay, EqualTokenPolicy::SameOwner)];
        let mut updates = Vec::new();
        if kept > progress.kept {
            let name = expr.name(attr::KEPT);
            let old = expr.value("kept", number(progress.kept));
            let new = expr.value("next", number(kept));
            conditions.push(format!("{name} = {old}"));
            updates.push(format!("SET {name} = {new}"));
        }
        if drained {
            // Stop listing the domain unless a transition landed since it was listed.
            if let Ok(version) = candidate.version.parse::<u64>() {
                let (ver, done, last, pend) = (
                    expr.name(attr::VER),
                    expr.name(attr::DONE),
                    expr.name(attr::LAST),
                    expr.name(attr::PENDING),
                );
                let listed = expr.value("ver", number(version));
                conditions.push(format!("{ver} = {listed} AND {done} = {last}"));
                updates.push(format!("REMOVE {pend}"));
            }
        }
        if !updates.is_empty() {
            let tidied = self
                .client()
                .update_item()
                .table_name(self.table())
                .set_key(Some(self.progress_key(domain)))
                .condition_expression(conditions.join(" AND "))
                .update_expression(updates.join(" "))
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .send()
                .await;
            if let Err(error) = tidied {
                // A transition or another purge came first: the next visit tidies up.
                if let Refusal::Failed(error) =
                    extension::update_refusal(error, self.table(), domain, Operation::Write)
                {
                    return Err(error.into());
                }
            }
        }
        Ok(Purged::new(removed))
    }
}

/// The most deletes one purge transaction holds, beside the relay check.
const MAX_DELETES: usize = 99;

impl DynamoDbOutbox {
    /// Deletes the delivered entries `seqs` (settled before `cut`) in one transaction with the
    /// relay rule checked on the progress item: refused (`Fenced`) to a relay older than the
    /// newest. False when an entry changed meanwhile (another purge took it): nothing deleted.
    async fn delete_delivered(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seqs: &[u64],
        cut: u64,
    ) -> Result<bool, OutboxError> {
        let mut expr = Expr::default();
        let pk = expr.name(attr::PK);
        let admits = expr.admits_on(attr::RELAY, relay, EqualTokenPolicy::SameOwner);
        let check = ConditionCheck::builder()
            .table_name(self.table())
            .set_key(Some(self.progress_key(domain)))
            .condition_expression(format!("attribute_exists({pk}) AND {admits}"))
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| unexpected(domain, e))?;
        let mut actions = vec![TransactWriteItem::builder().condition_check(check).build()];
        for &seq in seqs {
            let mut expr = Expr::default();
            let (st, sat) = (expr.name(attr::STATUS), expr.name(attr::SETTLED_AT));
            let d = expr.value("delivered", text("d"));
            let cut = expr.value("cut", number(cut));
            let delete = Delete::builder()
                .table_name(self.table())
                .set_key(Some(self.entry_key(domain, seq)))
                .condition_expression(format!("{st} = {d} AND {sat} <= {cut}"))
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .build()
                .map_err(|e| unexpected(domain, e))?;
            actions.push(TransactWriteItem::builder().delete(delete).build());
        }
        let sent = self
            .client()
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await;
        let Err(error) = sent else {
            return Ok(true);
        };
        match extension::transaction_refusal(error, self.table(), domain, Operation::Delete) {
            Refusal::Cancelled(reasons) => {
                match reasons.iter().position(CancelReason::condition_failed) {
                    Some(0) => {
                        self.not_admitted(domain, relay, reasons[0].item.as_ref())?;
                        Ok(false)
                    }
                    Some(_) => Ok(false),
                    None => Err(extension::cancellation(domain, &reasons).into()),
                }
            }
            Refusal::Failed(error) => Err(error.into()),
            other => Err(corrupt(domain, format!("a transaction answered {other:?}")).into()),
        }
    }
}
