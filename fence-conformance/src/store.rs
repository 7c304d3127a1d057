//! Scenarios for [`FencedStore`] adapters: each checks sentences of the trait's `# Behavior`
//! docs and of the design contract's acceptance rule.

use bytes_of::b;
use fence_core::{
    Domain, Entry, EqualTokenPolicy, FenceError, FencedStore, FencingToken, InvalidInput,
    OperationId, Revision, WriteCondition, WriteOutcome, WriteRequest, MAX_DOMAIN_BYTES,
    MAX_IDENTIFIER_BYTES,
};

use crate::scenario::{accepted, claimed, ensure, fenced, restarted, t};
use crate::{race, Failure, Namespace, ScenarioResult, StatePart, StoreHarness, Verdict};

mod bytes_of {
    /// A payload from a string literal.
    pub(super) fn b(text: &str) -> fence_core::Bytes {
        fence_core::Bytes::copy_from_slice(text.as_bytes())
    }
}

fn put(domain: &Domain, token: FencingToken, value: &str) -> WriteRequest {
    WriteRequest::put(domain.clone(), token, b(value))
}

async fn expect_value(
    store: &dyn FencedStore,
    domain: &Domain,
    value: &str,
    token: u64,
    revision: u64,
) -> Result<(), Failure> {
    let snapshot = store.read(domain).await?;
    let expected = Entry::Value {
        value: b(value),
        token: t(token)?,
        revision: Revision::new(revision),
    };
    ensure!(
        snapshot.entry == expected,
        "read of `{domain}`: expected {value:?} by token {token} at revision {revision}, got {:?} (value {:?})",
        snapshot.entry,
        snapshot.value()
    );
    Ok(())
}

async fn expect_hwm(
    store: &dyn FencedStore,
    domain: &Domain,
    hwm: Option<u64>,
) -> Result<(), Failure> {
    let found = store.high_water_mark(domain).await?.map(FencingToken::get);
    ensure!(
        found == hwm,
        "high-water mark of `{domain}`: expected {hwm:?}, got {found:?}"
    );
    let read = store
        .read(domain)
        .await?
        .high_water_mark
        .map(FencingToken::get);
    ensure!(
        read == hwm,
        "high-water mark read with the value of `{domain}`: expected {hwm:?}, got {read:?}"
    );
    Ok(())
}

/// A newer token is accepted; the outcome and the read report its token, revision and the
/// previous high-water mark.
pub async fn newer_token_is_accepted(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    let store = h.store();
    let d = ns.domain("d")?;
    expect_hwm(&*store, &d, None).await?;
    ensure!(
        store.read(&d).await?.entry == Entry::Absent,
        "fresh domain must read as absent"
    );

    let first = accepted("write token 1", store.write(&put(&d, t(1)?, "one")).await)?;
    ensure!(
        first.token == t(1)?
            && first.revision == Revision::new(1)
            && first.previous_high_water_mark.is_none(),
        "first write outcome: {first:?}"
    );
    let second = accepted("write token 2", store.write(&put(&d, t(2)?, "two")).await)?;
    ensure!(
        second.revision == Revision::new(2) && second.previous_high_water_mark == Some(t(1)?),
        "second write outcome: {second:?}"
    );
    expect_value(&*store, &d, "two", 2, 2).await?;
    expect_hwm(&*store, &d, Some(2)).await?;
    Ok(Verdict::Passed)
}

/// An older token is fenced with the exact tokens, and changes nothing (writes and deletes).
pub async fn older_token_is_fenced(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    let store = h.store();
    let d = ns.domain("d")?;
    accepted("write token 5", store.write(&put(&d, t(5)?, "five")).await)?;
    // The owner's own client (a cache, where the adapter keeps one), then other holders' fresh
    // clients, so that the server decides.
    fenced(
        "write token 4 through the owner's client",
        store.write(&put(&d, t(4)?, "four")).await,
        4,
        5,
    )?;
    fenced(
        "write token 4",
        h.holder().write(&put(&d, t(4)?, "four")).await,
        4,
        5,
    )?;
    fenced(
        "write token 1",
        h.holder().write(&put(&d, t(1)?, "one")).await,
        1,
        5,
    )?;
    if h.store().capabilities().delete {
        fenced(
            "delete token 4",
            h.holder()
                .write(&WriteRequest::delete(d.clone(), t(4)?))
                .await,
            4,
            5,
        )?;
    }
    match h.holder().write(&put(&d, t(4)?, "four")).await {
        Err(error) => ensure!(
            error.is_fenced() && !error.is_retryable(),
            "a fenced error must say fenced and not retryable: {error:?}"
        ),
        Ok(outcome) => return Err(Failure::new(format!("stale write accepted: {outcome:?}"))),
    }
    expect_value(&*store, &d, "five", 5, 1).await?;
    expect_hwm(&*store, &d, Some(5)).await?;
    Ok(Verdict::Passed)
}

/// The same owner writes many times with its token under the default policy.
pub async fn equal_token_same_owner_is_accepted(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    let d = ns.domain("d")?;
    accepted(
        "first write token 3",
        store.write(&put(&d, t(3)?, "a")).await,
    )?;
    let again = accepted(
        "second write token 3",
        store.write(&put(&d, t(3)?, "b")).await,
    )?;
    ensure!(
        again.previous_high_water_mark == Some(t(3)?),
        "outcome: {again:?}"
    );
    accepted(
        "explicit same-owner write token 3",
        store
            .write(&put(&d, t(3)?, "c").with_policy(EqualTokenPolicy::SameOwner))
            .await,
    )?;
    expect_value(&*store, &d, "c", 3, 3).await?;
    expect_hwm(&*store, &d, Some(3)).await?;
    Ok(Verdict::Passed)
}

/// Under the strict policy an equal token is a replay and is fenced; a newer one is accepted.
pub async fn equal_token_strict_is_fenced(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    let store = h.store();
    if !store.capabilities().strict_policy {
        return Ok(Verdict::NotApplicable("strict policy unsupported".into()));
    }
    let d = ns.domain("d")?;
    let strict = |token, value| put(&d, token, value).with_policy(EqualTokenPolicy::Strict);
    accepted(
        "strict write token 3 on fresh domain",
        store.write(&strict(t(3)?, "a")).await,
    )?;
    fenced(
        "strict replay of token 3",
        h.holder().write(&strict(t(3)?, "b")).await,
        3,
        3,
    )?;
    fenced(
        "strict write token 2",
        h.holder().write(&strict(t(2)?, "b")).await,
        2,
        3,
    )?;
    accepted(
        "strict write token 4",
        store.write(&strict(t(4)?, "c")).await,
    )?;
    expect_value(&*store, &d, "c", 4, 2).await?;
    Ok(Verdict::Passed)
}

/// Without a claim, a fresh resource accepts an old token until it sees a newer one.
pub async fn fresh_resource_accepts_old_token_until_newer(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    let d = ns.domain("d")?;
    accepted(
        "token 5 on a fresh domain",
        store.write(&put(&d, t(5)?, "five")).await,
    )?;
    accepted("token 7", store.write(&put(&d, t(7)?, "seven")).await)?;
    fenced(
        "token 5 after 7",
        h.holder().write(&put(&d, t(5)?, "late")).await,
        5,
        7,
    )?;
    fenced(
        "token 6 after 7",
        h.holder().write(&put(&d, t(6)?, "late")).await,
        6,
        7,
    )?;
    expect_value(&*store, &d, "seven", 7, 2).await?;
    Ok(Verdict::Passed)
}

/// A claim raises the high-water mark without data and fences stale holders before the new
/// owner's first write; claims are idempotent and never lower the mark.
pub async fn claim_fences_before_first_write(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    let d = ns.domain("d")?;
    let first = claimed("claim 10", store.claim(&d, t(10)?).await)?;
    ensure!(
        first.previous_high_water_mark.is_none() && first.token == t(10)?,
        "claim outcome: {first:?}"
    );
    ensure!(
        store.read(&d).await?.entry == Entry::Absent,
        "a claim must not create a value"
    );
    expect_hwm(&*store, &d, Some(10)).await?;
    fenced(
        "write token 9 after claim 10",
        h.holder().write(&put(&d, t(9)?, "stale")).await,
        9,
        10,
    )?;
    let again = claimed("claim 10 again", store.claim(&d, t(10)?).await)?;
    ensure!(
        again.previous_high_water_mark == Some(t(10)?),
        "idempotent claim outcome: {again:?}"
    );
    fenced("claim 9 after 10", h.holder().claim(&d, t(9)?).await, 9, 10)?;
    let write = accepted(
        "owner write token 10",
        store.write(&put(&d, t(10)?, "owner")).await,
    )?;
    ensure!(
        write.previous_high_water_mark == Some(t(10)?) && write.revision == Revision::new(1),
        "owner write outcome: {write:?}"
    );
    let next = claimed("claim 11", store.claim(&d, t(11)?).await)?;
    ensure!(
        next.previous_high_water_mark == Some(t(10)?),
        "claim 11 outcome: {next:?}"
    );
    expect_value(&*store, &d, "owner", 10, 1).await?;
    expect_hwm(&*store, &d, Some(11)).await?;
    fenced(
        "write token 10 after claim 11",
        h.holder().write(&put(&d, t(10)?, "old owner")).await,
        10,
        11,
    )?;
    Ok(Verdict::Passed)
}

/// Tokens compare only inside one domain.
pub async fn domains_are_independent(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    let store = h.store();
    let (a, b_dom) = (ns.domain("a")?, ns.domain("b")?);
    // Names that a naive key scheme would confuse with each other.
    let (braces, percent) = (ns.domain("{a}")?, ns.domain("%7Ba%7D")?);
    accepted("a token 100", store.write(&put(&a, t(100)?, "a")).await)?;
    accepted("b token 1", store.write(&put(&b_dom, t(1)?, "b")).await)?;
    claimed("claim a 200", store.claim(&a, t(200)?).await)?;
    accepted(
        "b token 1 again after a's claim of 200",
        store.write(&put(&b_dom, t(1)?, "b1")).await,
    )?;
    accepted("b token 2", store.write(&put(&b_dom, t(2)?, "b2")).await)?;
    accepted(
        "{a} token 5",
        store.write(&put(&braces, t(5)?, "braces")).await,
    )?;
    accepted(
        "%7Ba%7D token 1",
        store.write(&put(&percent, t(1)?, "percent")).await,
    )?;
    expect_hwm(&*store, &a, Some(200)).await?;
    expect_hwm(&*store, &b_dom, Some(2)).await?;
    expect_hwm(&*store, &braces, Some(5)).await?;
    expect_hwm(&*store, &percent, Some(1)).await?;
    expect_value(&*store, &a, "a", 100, 1).await?;
    expect_value(&*store, &b_dom, "b2", 2, 3).await?;
    expect_value(&*store, &braces, "braces", 5, 1).await?;
    expect_value(&*store, &percent, "percent", 1, 1).await?;
    Ok(Verdict::Passed)
}

/// A delete leaves a tombstone that keeps the high-water mark: a stale writer cannot recreate
/// the value with an old token.
pub async fn delete_leaves_tombstone_keeping_hwm(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    if !store.capabilities().delete {
        return Ok(Verdict::NotApplicable("delete unsupported".into()));
    }
    let d = ns.domain("d")?;
    accepted("write token 1", store.write(&put(&d, t(1)?, "v1")).await)?;
    let deleted = accepted(
        "delete token 2",
        store.write(&WriteRequest::delete(d.clone(), t(2)?)).await,
    )?;
    ensure!(
        deleted.revision == Revision::new(2),
        "delete outcome: {deleted:?}"
    );
    let snapshot = store.read(&d).await?;
    ensure!(
        snapshot.entry
            == (Entry::Tombstone {
                token: t(2)?,
                revision: Revision::new(2)
            })
            && snapshot.value().is_none(),
        "after delete expected a tombstone by token 2 at revision 2, got {:?}",
        snapshot.entry
    );
    expect_hwm(&*store, &d, Some(2)).await?;
    fenced(
        "stale recreate with token 1",
        h.holder().write(&put(&d, t(1)?, "zombie")).await,
        1,
        2,
    )?;
    fenced(
        "stale delete with token 1",
        h.holder()
            .write(&WriteRequest::delete(d.clone(), t(1)?))
            .await,
        1,
        2,
    )?;
    let recreated = accepted(
        "owner recreates with token 2",
        store.write(&put(&d, t(2)?, "v2")).await,
    )?;
    ensure!(
        recreated.revision == Revision::new(3),
        "recreate outcome: {recreated:?}"
    );
    expect_value(&*store, &d, "v2", 2, 3).await?;

    let never = ns.domain("never-written")?;
    accepted(
        "delete of an absent value",
        store
            .write(&WriteRequest::delete(never.clone(), t(4)?))
            .await,
    )?;
    fenced(
        "write token 3 after delete 4",
        h.holder().write(&put(&never, t(3)?, "zombie")).await,
        3,
        4,
    )?;
    expect_hwm(&*store, &never, Some(4)).await?;
    Ok(Verdict::Passed)
}

/// A retry of the same (domain, token, op id) returns the first outcome and applies nothing;
/// a different op id is a new operation; a new op id with a stale token is fenced.
pub async fn op_id_replay_returns_first_outcome(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    if !store.capabilities().op_id_replay() {
        return Ok(Verdict::NotApplicable(
            "operation ids are not retained".into(),
        ));
    }
    let d = ns.domain("d")?;
    let op = |id: &str| OperationId::new(id);
    // Op a creates the value: its retries must replay before the condition (now false) and,
    // later, before the token rule.
    let op_a = |token| {
        Ok::<_, Failure>(
            put(&d, token, "first")
                .with_op_id(op("a")?)
                .with_condition(WriteCondition::Absent),
        )
    };
    let first = accepted("first attempt of op a", store.write(&op_a(t(1)?)?).await)?;
    // A replay answered with an error is a wrong answer too, not a failed operation.
    let retry = store.write(&op_a(t(1)?)?).await;
    ensure!(
        matches!(&retry, Ok(outcome) if *outcome == WriteOutcome::Duplicate(first.clone())),
        "retry of op a: expected duplicate of {first:?}, got {retry:?}"
    );
    expect_value(&*store, &d, "first", 1, 1).await?;

    let other = accepted(
        "op b with the same token",
        store
            .write(&put(&d, t(1)?, "second").with_op_id(op("b")?))
            .await,
    )?;
    ensure!(
        other.revision == Revision::new(2),
        "op b outcome: {other:?}"
    );
    accepted(
        "newer owner writes",
        store.write(&put(&d, t(2)?, "newer")).await,
    )?;

    // The owner's client reads the newer mark first: a client that refuses tokens it knows
    // are stale without asking the resource must still replay.
    store.high_water_mark(&d).await?;
    for (client, late) in [
        ("the owner's client", store.clone()),
        ("a fresh client", h.holder()),
    ] {
        let late_retry = late.write(&op_a(t(1)?)?).await;
        ensure!(
            matches!(&late_retry, Ok(outcome) if *outcome == WriteOutcome::Duplicate(first.clone())),
            "retry of op a through {client} after a newer owner wrote: expected the first outcome, got {late_retry:?}"
        );
    }
    fenced(
        "new op c with stale token 1",
        h.holder()
            .write(&put(&d, t(1)?, "zombie").with_op_id(op("c")?))
            .await,
        1,
        2,
    )?;
    expect_value(&*store, &d, "newer", 2, 3).await?;
    Ok(Verdict::Passed)
}

/// Every decision vector the store can answer ([`crate::vectors`]: states reached through the
/// API × writes, exhaustive on small tokens and the u64 edges) is answered as fence-core's rule
/// answers it on the state the store reports, and a refusal or a replay changes nothing: the
/// store's own copy of the rule (a script, a SQL function, a txn, a conditional request) agrees
/// with the rule on every one.
pub async fn every_vector_agrees_with_the_rule(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    let vectors = crate::vectors::applicable(&store.capabilities());
    let domains = (0..vectors.len())
        .map(|n| ns.domain(&format!("v{n}")))
        .collect::<Result<Vec<_>, _>>()?;
    let count = vectors.len();
    if count == 0 {
        return Ok(Verdict::NotApplicable(
            "a store that accepts only issued tokens: the vectors do not know its issuer".into(),
        ));
    }
    crate::vectors::run(store, vectors, domains, 16)
        .await
        .map_err(Failure::new)?;
    println!("decision vectors: {count} agree with fence-core's rule");
    Ok(Verdict::Passed)
}

/// State at the resource that is not Fence's fails closed and is left alone: after a value
/// written with token 2, the harness overwrites the domain's mark, then (on another domain) its
/// entry record, going around Fence ([`StoreHarness::corrupt`]); every request on it — claims,
/// puts under either policy, deletes, puts with an operation id or a condition, with tokens 1, 2,
/// 3 and `u64::MAX`, then a read and a mark read — is refused with `CorruptState` naming the
/// domain and not retryable ([`crate::vectors::corrupt_vectors`]). The reads come last, so a
/// request that overwrote the damage would show as a read that succeeds. The requests go
/// first through the client that wrote the value, so that whatever it cached is put to the
/// test (it may refuse a token below the mark it saw as `Fenced` without asking: that refusal
/// is true and changes nothing), then through another holder's client, which must ask the
/// resource and be told.
pub async fn corrupt_state_is_refused_and_left_alone(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    let vectors = crate::vectors::corrupt_vectors(&store.capabilities());
    let mut checked = 0;
    for (name, part) in [("mark", StatePart::Mark), ("entry", StatePart::Entry)] {
        let d = ns.domain(name)?;
        accepted(
            "the value to corrupt",
            store.write(&put(&d, t(2)?, "kept")).await,
        )?;
        let corrupted = h
            .corrupt(&d, part)
            .await
            .map_err(|e| Failure::new(format!("corrupting the {name} of `{d}`: {e}")))?;
        if !corrupted {
            continue;
        }
        crate::vectors::run_corrupt(store.as_ref(), &d, &vectors, Some(2))
            .await
            .map_err(Failure::new)?;
        crate::vectors::run_corrupt(h.holder().as_ref(), &d, &vectors, None)
            .await
            .map_err(Failure::new)?;
        checked += 2 * vectors.len();
    }
    if checked == 0 {
        return Ok(Verdict::NotApplicable(
            "the harness corrupts no part of the state".into(),
        ));
    }
    println!("corrupt-state vectors: {checked} refused and left alone");
    Ok(Verdict::Passed)
}

/// Compare-and-set on the data's revision is independent of the token: a mismatch changes
/// nothing, not even the high-water mark.
pub async fn revision_condition_is_checked(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    let store = h.store();
    if !store.capabilities().revision_cas {
        return Ok(Verdict::NotApplicable(
            "revision compare-and-set unsupported".into(),
        ));
    }
    let d = ns.domain("d")?;
    let with = |token, value, condition| put(&d, token, value).with_condition(condition);
    accepted(
        "create when absent",
        store
            .write(&with(t(1)?, "v1", WriteCondition::Absent))
            .await,
    )?;
    match store.write(&with(t(5)?, "x", WriteCondition::Absent)).await {
        Err(FenceError::RevisionMismatch {
            expected: WriteCondition::Absent,
            actual,
            ..
        }) if actual == Some(Revision::new(1)) => {}
        other => {
            return Err(Failure::new(format!(
                "create over a live value: expected a revision mismatch at 1, got {other:?}"
            )))
        }
    }
    expect_hwm(&*store, &d, Some(1)).await?;
    accepted(
        "update at revision 1",
        store
            .write(&with(
                t(1)?,
                "v2",
                WriteCondition::Revision(Revision::new(1)),
            ))
            .await,
    )?;
    match store
        .write(&with(
            t(6)?,
            "x",
            WriteCondition::Revision(Revision::new(1)),
        ))
        .await
    {
        Err(FenceError::RevisionMismatch { actual, .. }) if actual == Some(Revision::new(2)) => {}
        other => {
            return Err(Failure::new(format!(
                "update at stale revision 1: expected mismatch at 2, got {other:?}"
            )))
        }
    }
    expect_hwm(&*store, &d, Some(1)).await?;
    // The token check comes first: a stale holder learns it is fenced (terminal), not that
    // its condition failed (which would invite a re-read and retry).
    claimed("claim 3", store.claim(&d, t(3)?).await)?;
    fenced(
        "stale token 2 with a wrong revision",
        h.holder()
            .write(&with(
                t(2)?,
                "x",
                WriteCondition::Revision(Revision::new(9)),
            ))
            .await,
        2,
        3,
    )?;
    expect_value(&*store, &d, "v2", 1, 2).await?;
    if store.capabilities().delete {
        let delete = WriteRequest::delete(d.clone(), t(3)?)
            .with_condition(WriteCondition::Revision(Revision::new(2)));
        accepted(
            "conditional delete at revision 2",
            store.write(&delete).await,
        )?;
        accepted(
            "create after the tombstone",
            store
                .write(&with(t(3)?, "v3", WriteCondition::Absent))
                .await,
        )?;
        expect_value(&*store, &d, "v3", 3, 4).await?;
    }
    Ok(Verdict::Passed)
}

/// Invalid input is refused by the types or before any I/O, and changes nothing.
pub async fn invalid_input_is_rejected_before_io(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    ensure!(
        FencingToken::new(0) == Err(InvalidInput::ZeroToken),
        "zero token must be refused"
    );
    ensure!(
        "0".parse::<FencingToken>() == Err(InvalidInput::ZeroToken),
        "\"0\" must be refused"
    );
    for bad in ["", "-3", "1e3", " 7", "007", "18446744073709551616", "abc"] {
        ensure!(
            matches!(
                bad.parse::<FencingToken>(),
                Err(InvalidInput::UnparsableToken { .. })
            ),
            "token text {bad:?} must be refused"
        );
    }
    ensure!(
        Domain::new("") == Err(InvalidInput::EmptyDomain),
        "empty domain must be refused"
    );
    ensure!(
        matches!(
            Domain::new("x".repeat(MAX_DOMAIN_BYTES + 1)),
            Err(InvalidInput::DomainTooLong { .. })
        ),
        "over-long domain must be refused"
    );
    ensure!(
        matches!(
            Domain::new("a\u{0}b"),
            Err(InvalidInput::DomainControlCharacter { position: 1 })
        ),
        "control character in a domain must be refused"
    );
    ensure!(
        matches!(
            OperationId::new(""),
            Err(InvalidInput::EmptyIdentifier { .. })
        ),
        "empty operation id must be refused"
    );
    ensure!(
        matches!(
            OperationId::new("o".repeat(MAX_IDENTIFIER_BYTES + 1)),
            Err(InvalidInput::IdentifierTooLong { .. })
        ),
        "over-long operation id must be refused"
    );

    let store = h.store();
    let d = ns.domain("d")?;
    accepted("write token 1", store.write(&put(&d, t(1)?, "small")).await)?;
    if let Some(max) = store
        .capabilities()
        .max_value_bytes
        .filter(|&max| max <= 64 << 20)
    {
        let oversized = WriteRequest::put(d.clone(), t(9)?, vec![b'x'; max + 1]);
        match store.write(&oversized).await {
            Err(FenceError::InvalidInput(InvalidInput::ValueTooLarge {
                size, max: limit, ..
            })) if size == max + 1 && limit == max => {}
            other => {
                return Err(Failure::new(format!(
                    "oversized value: expected ValueTooLarge, got {other:?}"
                )))
            }
        }
        expect_hwm(&*store, &d, Some(1)).await?;
        expect_value(&*store, &d, "small", 1, 1).await?;
        if let Some(unreachable) = h.unreachable_store() {
            match unreachable.write(&oversized).await {
                Err(FenceError::InvalidInput(InvalidInput::ValueTooLarge { .. })) => {}
                other => return Err(Failure::new(format!(
                    "oversized value to an unreachable server: expected ValueTooLarge before any I/O, got {other:?}"
                ))),
            }
        }
    }
    Ok(Verdict::Passed)
}

/// Writers with mixed tokens race on one domain; the accepted writes, ordered by revision,
/// carry non-decreasing tokens, each at or above the mark at its acceptance, and the final
/// state is exactly the last accepted write.
pub async fn concurrent_writers_with_mixed_tokens(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let d = ns.domain("race")?;
    let writers = h.race_writers().max(2);
    race::store_race(
        &|| h.holder(),
        &d,
        &race::mixed_tokens(writers),
        h.race_rounds(),
        EqualTokenPolicy::SameOwner,
    )
    .await
}

/// Writers race with the SAME fresh token under the strict policy: exactly one wins each round.
pub async fn concurrent_strict_writers_one_winner_per_token(
    h: &dyn StoreHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let store = h.store();
    if !store.capabilities().strict_policy {
        return Ok(Verdict::NotApplicable("strict policy unsupported".into()));
    }
    let d = ns.domain("strict-race")?;
    race::strict_rounds(
        &|| h.holder(),
        &d,
        h.race_writers().max(2),
        (h.race_rounds() / 3).max(3),
    )
    .await
}

/// Claims with rising tokens race with writers: no write is accepted below the mark at its
/// acceptance, and the final mark is the greatest accepted token.
pub async fn concurrent_claims_and_writes(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    let d = ns.domain("claim-race")?;
    race::claims_and_writes(&|| h.holder(), &d, h.race_writers().max(2), h.race_rounds()).await
}

/// State and high-water marks survive a restart of the backend server: the value, its writer
/// token and revision, a claim-only mark, and a remembered operation id (replayed, not applied
/// again) are all there afterwards, and stale holders are still fenced by the server.
pub async fn state_survives_restart(h: &dyn StoreHarness, ns: &Namespace) -> ScenarioResult {
    if !h.store().capabilities().survives_restart {
        return Ok(Verdict::NotApplicable(
            "backend declares state lost on restart".into(),
        ));
    }
    let store = h.store();
    let (d, claimed_only) = (ns.domain("d")?, ns.domain("claimed")?);
    accepted("write token 5", store.write(&put(&d, t(5)?, "first")).await)?;
    let remembered = store.capabilities().op_id_replay();
    let op = put(&d, t(5)?, "before restart").with_op_id(OperationId::new("op-before")?);
    let first = accepted("write token 5 with an op id", store.write(&op).await)?;
    claimed("claim 9", store.claim(&claimed_only, t(9)?).await)?;
    if let Some(not_applicable) = restarted(
        h.restart().await,
        h.not_applicable(),
        "state_survives_restart",
    )? {
        return Ok(not_applicable);
    }
    let store = h.store();
    fenced(
        "stale write after restart",
        h.holder().write(&put(&d, t(4)?, "zombie")).await,
        4,
        5,
    )?;
    fenced(
        "stale write to the claimed domain after restart",
        h.holder().write(&put(&claimed_only, t(8)?, "zombie")).await,
        8,
        9,
    )?;
    expect_value(&*store, &d, "before restart", 5, 2).await?;
    expect_hwm(&*store, &claimed_only, Some(9)).await?;
    ensure!(
        store.read(&claimed_only).await?.entry == Entry::Absent,
        "a claim-only domain must still hold no value after the restart"
    );
    if remembered {
        let replay = h.holder().write(&op).await?;
        ensure!(
            replay == WriteOutcome::Duplicate(first.clone()),
            "an operation id remembered before the restart: expected the first outcome {first:?}, got {replay:?}"
        );
        expect_value(&*store, &d, "before restart", 5, 2).await?;
    }
    accepted(
        "newer write after restart",
        store.write(&put(&d, t(6)?, "after")).await,
    )?;
    expect_value(&*store, &d, "after", 6, 3).await?;
    Ok(Verdict::Passed)
}
