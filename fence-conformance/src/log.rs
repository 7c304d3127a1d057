//! Scenarios for [`FencedLog`] adapters (batched appends in transactions).

use fence_core::{
    AppendOutcome, AppendRequest, Bytes, Domain, EqualTokenPolicy, FenceError, FencedLog,
    FencingToken, InvalidInput, OperationId, Record,
};

use crate::scenario::{appended, claimed, ensure, fenced, restarted, t};
use crate::{race, Failure, LogHarness, Namespace, ScenarioResult, Verdict};

fn batch(domain: &Domain, token: FencingToken, values: &[&str]) -> AppendRequest {
    let records = values
        .iter()
        .map(|v| Record::new(Bytes::copy_from_slice(v.as_bytes())))
        .collect();
    AppendRequest::new(domain.clone(), token, records)
}

/// Checks the domain's committed records and their tokens, in order.
async fn expect_log(
    log: &dyn FencedLog,
    domain: &Domain,
    expected: &[(&str, u64)],
) -> Result<(), Failure> {
    let entries = log.read_log(domain).await?;
    let found: Vec<(String, u64)> = entries
        .iter()
        .map(|e| {
            (
                String::from_utf8_lossy(&e.record.value).into_owned(),
                e.token.get(),
            )
        })
        .collect();
    let wanted: Vec<(String, u64)> = expected
        .iter()
        .map(|(v, t)| ((*v).to_owned(), *t))
        .collect();
    ensure!(
        found == wanted,
        "log of `{domain}`: expected {wanted:?}, found {found:?}"
    );
    Ok(())
}

/// A newer token appends; an older one is fenced and leaves nothing visible.
pub async fn log_newer_appended_older_fenced(h: &dyn LogHarness, ns: &Namespace) -> ScenarioResult {
    let log = h.log();
    let d = ns.domain("d")?;
    let first = appended(
        "append token 1",
        log.append(&batch(&d, t(1)?, &["a", "b"])).await,
    )?;
    ensure!(
        first.records == 2 && first.previous_high_water_mark.is_none(),
        "outcome {first:?}"
    );
    let second = appended(
        "append token 2",
        log.append(&batch(&d, t(2)?, &["c"])).await,
    )?;
    ensure!(
        second.previous_high_water_mark == Some(t(1)?),
        "outcome {second:?}"
    );
    fenced(
        "append token 1 after 2",
        h.holder().append(&batch(&d, t(1)?, &["zombie"])).await,
        1,
        2,
    )?;
    expect_log(&*log, &d, &[("a", 1), ("b", 1), ("c", 2)]).await?;
    ensure!(
        log.high_water_mark(&d).await? == Some(t(2)?),
        "mark must be 2"
    );
    Ok(Verdict::Passed)
}

/// Equal tokens append under the same-owner policy and are fenced under the strict one.
pub async fn log_equal_token_policy(h: &dyn LogHarness, ns: &Namespace) -> ScenarioResult {
    let log = h.log();
    let d = ns.domain("d")?;
    appended(
        "append token 3",
        log.append(&batch(&d, t(3)?, &["a"])).await,
    )?;
    appended(
        "append token 3 again",
        log.append(&batch(&d, t(3)?, &["b"])).await,
    )?;
    if log.capabilities().strict_policy {
        let strict = batch(&d, t(3)?, &["c"]).with_policy(EqualTokenPolicy::Strict);
        fenced(
            "strict append token 3",
            h.holder().append(&strict).await,
            3,
            3,
        )?;
        let fresh = batch(&d, t(4)?, &["d"]).with_policy(EqualTokenPolicy::Strict);
        appended("strict append token 4", log.append(&fresh).await)?;
        expect_log(&*log, &d, &[("a", 3), ("b", 3), ("d", 4)]).await?;
    } else {
        expect_log(&*log, &d, &[("a", 3), ("b", 3)]).await?;
    }
    Ok(Verdict::Passed)
}

/// A claim fences stale appenders before the new owner's first append.
pub async fn log_claim_fences_before_first_append(
    h: &dyn LogHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let log = h.log();
    let d = ns.domain("d")?;
    let claim = claimed("claim 5", log.claim(&d, t(5)?).await)?;
    ensure!(
        claim.previous_high_water_mark.is_none(),
        "claim outcome {claim:?}"
    );
    fenced(
        "append token 4 after claim 5",
        h.holder().append(&batch(&d, t(4)?, &["zombie"])).await,
        4,
        5,
    )?;
    expect_log(&*log, &d, &[]).await?;
    fenced("claim 4 after 5", h.holder().claim(&d, t(4)?).await, 4, 5)?;
    appended(
        "owner append token 5",
        log.append(&batch(&d, t(5)?, &["owner"])).await,
    )?;
    expect_log(&*log, &d, &[("owner", 5)]).await?;
    Ok(Verdict::Passed)
}

/// Tokens of one domain never fence another.
pub async fn log_domains_are_independent(h: &dyn LogHarness, ns: &Namespace) -> ScenarioResult {
    let log = h.log();
    let (a, b) = (ns.domain("a")?, ns.domain("b")?);
    appended("a token 50", log.append(&batch(&a, t(50)?, &["a"])).await)?;
    appended("b token 1", log.append(&batch(&b, t(1)?, &["b"])).await)?;
    claimed("claim a 60", log.claim(&a, t(60)?).await)?;
    appended(
        "b token 1 again",
        log.append(&batch(&b, t(1)?, &["b2"])).await,
    )?;
    // Names that a naive key or id scheme would confuse with each other.
    let (braces, percent) = (ns.domain("{a}")?, ns.domain("%7Ba%7D")?);
    appended(
        "{a} token 5",
        log.append(&batch(&braces, t(5)?, &["braces"])).await,
    )?;
    appended(
        "%7Ba%7D token 1",
        log.append(&batch(&percent, t(1)?, &["percent"])).await,
    )?;
    expect_log(&*log, &a, &[("a", 50)]).await?;
    expect_log(&*log, &b, &[("b", 1), ("b2", 1)]).await?;
    expect_log(&*log, &braces, &[("braces", 5)]).await?;
    expect_log(&*log, &percent, &[("percent", 1)]).await?;
    ensure!(
        log.high_water_mark(&b).await? == Some(t(1)?),
        "b's mark must stay 1"
    );
    Ok(Verdict::Passed)
}

/// Every log decision vector the log can answer ([`crate::vectors::all_log`]) is answered as
/// fence-core's rule answers it, a committed batch is readable as sent, and a refusal or a
/// replay changes neither the records nor the mark: the log's own decision (a ledger, a broker
/// transaction) agrees with the rule on every one.
pub async fn log_every_vector_agrees_with_the_rule(
    h: &dyn LogHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let log = h.log();
    let vectors = crate::vectors::applicable_log(&log.capabilities());
    let domains = (0..vectors.len())
        .map(|n| ns.domain(&format!("v{n}")))
        .collect::<Result<Vec<_>, _>>()?;
    let count = vectors.len();
    if count == 0 {
        return Ok(Verdict::NotApplicable(
            "a store that accepts only issued tokens: the vectors do not know its issuer".into(),
        ));
    }
    crate::vectors::run_log(log, vectors, domains, 16)
        .await
        .map_err(Failure::new)?;
    println!("log decision vectors: {count} agree with fence-core's rule");
    Ok(Verdict::Passed)
}

/// A retried append with the same (domain, token, op id) commits nothing twice.
pub async fn log_op_id_replay_returns_first_outcome(
    h: &dyn LogHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let log = h.log();
    if !log.capabilities().op_id_replay() {
        return Ok(Verdict::NotApplicable(
            "operation ids are not retained".into(),
        ));
    }
    let d = ns.domain("d")?;
    let op = OperationId::new("batch-1")?;
    let request = batch(&d, t(1)?, &["x", "y"]).with_op_id(op.clone());
    let first = appended("first attempt", log.append(&request).await)?;
    match log.append(&request).await {
        Ok(AppendOutcome::Duplicate(again)) if again == first => {}
        other => {
            return Err(Failure::new(format!(
                "retry: expected duplicate of {first:?}, got {other:?}"
            )))
        }
    }
    appended(
        "another op id",
        log.append(&batch(&d, t(1)?, &["z"]).with_op_id(OperationId::new("batch-2")?))
            .await,
    )?;
    appended(
        "a newer owner appends",
        h.holder().append(&batch(&d, t(2)?, &["n"])).await,
    )?;
    // A late retry replays before the token rule, whether its client saw the newer mark or not.
    // The owner's client reads the newer mark first: a client that refuses tokens it knows
    // are stale without asking the resource must still replay.
    log.high_water_mark(&d).await?;
    for (client, late) in [
        ("the owner's client", log.clone()),
        ("a fresh client", h.holder()),
    ] {
        match late.append(&request).await {
            Ok(AppendOutcome::Duplicate(again)) if again == first => {}
            other => {
                return Err(Failure::new(format!(
                    "late retry through {client} after a newer owner appended: expected duplicate of {first:?}, got {other:?}"
                )))
            }
        }
    }
    fenced(
        "a new op id with the stale token",
        h.holder()
            .append(&batch(&d, t(1)?, &["zombie"]).with_op_id(OperationId::new("batch-3")?))
            .await,
        1,
        2,
    )?;
    expect_log(&*log, &d, &[("x", 1), ("y", 1), ("z", 1), ("n", 2)]).await?;
    Ok(Verdict::Passed)
}

/// A batch is committed whole or not at all, in order.
pub async fn log_batch_is_all_or_nothing(h: &dyn LogHarness, ns: &Namespace) -> ScenarioResult {
    let log = h.log();
    let d = ns.domain("d")?;
    let values: Vec<String> = (0..50).map(|i| format!("r{i:02}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let committed = appended(
        "batch of 50 with token 2",
        log.append(&batch(&d, t(2)?, &refs)).await,
    )?;
    ensure!(committed.records == 50, "outcome {committed:?}");
    fenced(
        "stale batch of 50",
        h.holder().append(&batch(&d, t(1)?, &refs)).await,
        1,
        2,
    )?;
    let expected: Vec<(&str, u64)> = refs.iter().map(|v| (*v, 2)).collect();
    expect_log(&*log, &d, &expected).await?;
    Ok(Verdict::Passed)
}

/// Empty or oversized batches are refused before any I/O.
pub async fn log_invalid_input_is_rejected_before_io(
    h: &dyn LogHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let log = h.log();
    let d = ns.domain("d")?;
    let empty = AppendRequest::new(d.clone(), t(1)?, Vec::new());
    match log.append(&empty).await {
        Err(FenceError::InvalidInput(InvalidInput::EmptyBatch { .. })) => {}
        other => {
            return Err(Failure::new(format!(
                "empty batch: expected EmptyBatch, got {other:?}"
            )))
        }
    }
    if let Some(unreachable) = h.unreachable_log() {
        match unreachable.append(&empty).await {
            Err(FenceError::InvalidInput(InvalidInput::EmptyBatch { .. })) => {}
            other => {
                return Err(Failure::new(format!(
                    "empty batch to an unreachable server: expected EmptyBatch, got {other:?}"
                )))
            }
        }
    }
    if let Some(max) = log
        .capabilities()
        .max_value_bytes
        .filter(|&max| max <= 64 << 20)
    {
        let big = AppendRequest::new(d.clone(), t(1)?, vec![Record::new(vec![b'x'; max + 1])]);
        match log.append(&big).await {
            Err(FenceError::InvalidInput(InvalidInput::ValueTooLarge { .. })) => {}
            other => {
                return Err(Failure::new(format!(
                    "oversized batch: expected ValueTooLarge, got {other:?}"
                )))
            }
        }
        if let Some(unreachable) = h.unreachable_log() {
            match unreachable.append(&big).await {
                Err(FenceError::InvalidInput(_)) => {}
                other => {
                    return Err(Failure::new(format!(
                        "oversized batch to an unreachable server: got {other:?}"
                    )))
                }
            }
        }
    }
    ensure!(
        log.high_water_mark(&d).await?.is_none(),
        "refused input must not set a mark"
    );
    expect_log(&*log, &d, &[]).await?;
    Ok(Verdict::Passed)
}

/// Appenders with mixed tokens race; the log holds exactly the accepted batches, in token order.
pub async fn log_concurrent_appenders_with_mixed_tokens(
    h: &dyn LogHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let d = ns.domain("race")?;
    let writers = h.race_writers().max(2);
    race::log_race(h.log(), &d, &race::mixed_tokens(writers), h.race_rounds()).await
}

/// The log and its mark survive a restart of the backend: the records, a claim-only mark and a
/// remembered operation id (replayed, not appended again) are all there afterwards.
pub async fn log_state_survives_restart(h: &dyn LogHarness, ns: &Namespace) -> ScenarioResult {
    if !h.log().capabilities().survives_restart {
        return Ok(Verdict::NotApplicable(
            "backend declares state lost on restart".into(),
        ));
    }
    let (d, claimed_only) = (ns.domain("d")?, ns.domain("claimed")?);
    let log = h.log();
    let op = batch(&d, t(5)?, &["kept"]).with_op_id(OperationId::new("op-before")?);
    let first = appended("append token 5 with an op id", log.append(&op).await)?;
    claimed("claim 9", log.claim(&claimed_only, t(9)?).await)?;
    let remembered = log.capabilities().op_id_replay();
    if let Some(not_applicable) = restarted(
        h.restart().await,
        h.not_applicable(),
        "log_state_survives_restart",
    )? {
        return Ok(not_applicable);
    }
    let log = h.log();
    fenced(
        "stale append after restart",
        h.holder().append(&batch(&d, t(4)?, &["zombie"])).await,
        4,
        5,
    )?;
    fenced(
        "stale append to the claimed domain after restart",
        h.holder()
            .append(&batch(&claimed_only, t(8)?, &["zombie"]))
            .await,
        8,
        9,
    )?;
    if remembered {
        let replay = h.holder().append(&op).await?;
        ensure!(
            replay == AppendOutcome::Duplicate(first.clone()),
            "an operation id remembered before the restart: expected the first outcome {first:?}, got {replay:?}"
        );
    }
    expect_log(&*log, &d, &[("kept", 5)]).await?;
    expect_log(&*log, &claimed_only, &[]).await?;
    Ok(Verdict::Passed)
}
