//! Concurrent scenarios: many tasks race on one domain and every outcome is checked against
//! what the acceptance rule allows under ANY interleaving. Adapters reuse [`store_race`] for
//! their own races (many domains at once, other writer counts).

use std::collections::HashMap;
use std::sync::Arc;

use fence_core::{
    Accepted, AppendOutcome, AppendRequest, Bytes, Domain, Entry, EqualTokenPolicy, FenceError,
    FencedLog, FencedStore, FencingToken, Record, WriteOutcome, WriteRequest,
};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::scenario::{ensure, t};
use crate::{Failure, ScenarioResult, Verdict};

/// Mixed tokens for `writers` racers; for ten: 1,8,7,6,5,4,3,2,1,8 (the greatest shared by two);
/// for two or three: 1,2 and 1,2,1. Two or more racers always hold at least two tokens.
pub fn mixed_tokens(writers: usize) -> Vec<u64> {
    let spread = writers.saturating_sub(2).max(2) as u64;
    // `spread - 1` is coprime with `spread`: the tokens walk down through every value.
    (0..writers as u64)
        .map(|i| 1 + (i * (spread - 1)) % spread)
        .collect()
}

/// The token `writer` holds in `round`: its mixed token, raised each round by the greatest one,
/// as if every racer re-acquired its lease between rounds. Tokens mix within a round and rise
/// across rounds, so a slow racer is overtaken by later rounds of the others, and no outcome is
/// decided by the first write of the greatest token alone.
fn reacquired(tokens: &[u64], writer: usize, round: usize) -> u64 {
    let step = tokens.iter().copied().max().unwrap_or(1);
    tokens[writer] + round as u64 * step
}

/// What one racing request observed.
#[derive(Debug)]
enum Seen<T> {
    Accepted(T),
    Fenced { presented: u64, current: u64 },
    Other(String),
}

fn classify<T, O: std::fmt::Debug>(
    result: Result<O, FenceError>,
    accept: impl FnOnce(O) -> Option<T>,
) -> Seen<T> {
    match result {
        Ok(outcome) => {
            let shown = format!("{outcome:?}");
            accept(outcome).map_or(
                Seen::Other(format!("unexpected outcome {shown}")),
                Seen::Accepted,
            )
        }
        Err(FenceError::Fenced {
            presented, current, ..
        }) => Seen::Fenced {
            presented: presented.get(),
            current: current.get(),
        },
        Err(error) => Seen::Other(format!("{error} ({error:?})")),
    }
}

fn write_accepted(outcome: WriteOutcome) -> Option<Accepted> {
    match outcome {
        WriteOutcome::Accepted(accepted) => Some(accepted),
        _ => None,
    }
}

async fn join_all<T: Send + 'static>(mut set: JoinSet<T>) -> Result<Vec<T>, Failure> {
    let mut out = Vec::new();
    while let Some(joined) = set.join_next().await {
        out.push(joined.map_err(|e| Failure::new(format!("racing task failed: {e}")))?);
    }
    Ok(out)
}

/// Checks accepted writes of a domain that nothing else wrote: ordered by revision they are
/// contiguous from 1, each one's previous mark is at most its token, and tokens never go down.
/// Returns them in revision order.
fn check_revision_order(
    mut writes: Vec<(Accepted, Bytes)>,
    claims_raced: bool,
) -> Result<Vec<(Accepted, Bytes)>, Failure> {
    writes.sort_by_key(|(accepted, _)| accepted.revision);
    let mut previous_token: Option<FencingToken> = None;
    for (index, (accepted, _)) in writes.iter().enumerate() {
        ensure!(
            accepted.revision.get() == index as u64 + 1,
            "accepted revisions must be contiguous from 1: position {index} has {:?}",
            accepted.revision
        );
        if let Some(mark) = accepted.previous_high_water_mark {
            ensure!(
                accepted.token >= mark,
                "write with token {} was accepted while the mark was {mark}",
                accepted.token
            );
        }
        if let Some(previous) = previous_token {
            ensure!(
                accepted.token >= previous,
                "token went down along revisions: {previous} then {} at {:?}",
                accepted.token,
                accepted.revision
            );
            if !claims_raced {
                ensure!(
                    accepted.previous_high_water_mark == Some(previous),
                    "write at {:?} saw mark {:?}, but the write before it carried {previous}",
                    accepted.revision,
                    accepted.previous_high_water_mark
                );
            }
        }
        previous_token = Some(accepted.token);
    }
    Ok(writes)
}

async fn check_final_value(
    store: &dyn FencedStore,
    domain: &Domain,
    last: Option<&(Accepted, Bytes)>,
    hwm: u64,
) -> Result<(), Failure> {
    let snapshot = store.read(domain).await?;
    let expected = match last {
        Some((accepted, value)) => Entry::Value {
            value: value.clone(),
            token: accepted.token,
            revision: accepted.revision,
        },
        None => Entry::Absent,
    };
    ensure!(
        snapshot.entry == expected,
        "final state must be the last accepted write {expected:?} (value {:?}), got {:?} (value {:?})",
        last.map(|(_, v)| v),
        snapshot.entry,
        snapshot.value()
    );
    ensure!(
        snapshot.high_water_mark == Some(t(hwm)?),
        "final mark must be {hwm}, got {:?}",
        snapshot.high_water_mark
    );
    Ok(())
}

/// A source of clients: each racer gets its own (a fresh holder where the adapter keeps client
/// state), so the server, not a shared cache, decides every racing request.
pub type Clients<'a> = &'a (dyn Fn() -> Arc<dyn FencedStore> + Sync);

/// Writers with the given tokens race `rounds` writes each on one fresh domain, each through its
/// own client from `clients`; every outcome and the final state are checked against what the
/// acceptance rule allows under any interleaving.
pub async fn store_race(
    clients: Clients<'_>,
    domain: &Domain,
    tokens: &[u64],
    rounds: usize,
    policy: EqualTokenPolicy,
) -> ScenarioResult {
    let barrier = Arc::new(Barrier::new(tokens.len()));
    let mut set = JoinSet::new();
    let shared: Arc<[u64]> = tokens.into();
    for writer in 0..tokens.len() {
        let (store, domain, barrier) = (clients(), domain.clone(), barrier.clone());
        let tokens = shared.clone();
        set.spawn(async move {
            let mut seen = Vec::with_capacity(rounds);
            barrier.wait().await;
            for round in 0..rounds {
                let Ok(token) = FencingToken::new(reacquired(&tokens, writer, round)) else {
                    return seen;
                };
                let value = Bytes::from(format!("writer {writer} token {token} round {round}"));
                let request =
                    WriteRequest::put(domain.clone(), token, value.clone()).with_policy(policy);
                let result = store.write(&request).await;
                seen.push((
                    token.get(),
                    classify(result, |o| write_accepted(o).map(|a| (a, value))),
                ));
            }
            seen
        });
    }
    let seen: Vec<_> = join_all(set).await?.into_iter().flatten().collect();
    ensure!(
        seen.len() == tokens.len() * rounds,
        "every racing write must report an outcome"
    );

    // The greatest token is the last round's greatest, and nothing can fence it.
    let last_round = rounds.saturating_sub(1);
    let max = (0..tokens.len())
        .map(|w| reacquired(tokens, w, last_round))
        .max()
        .unwrap_or(1);
    let mut writes = Vec::new();
    let mut accepted_at_max = 0;
    for (token, outcome) in seen {
        match outcome {
            Seen::Accepted((accepted, value)) => {
                ensure!(
                    accepted.token.get() == token,
                    "outcome names token {} for a write of {token}",
                    accepted.token
                );
                accepted_at_max += usize::from(token == max);
                writes.push((accepted, value));
            }
            Seen::Fenced { presented, current } => {
                ensure!(
                    presented == token,
                    "fenced outcome names token {presented} for a write of {token}"
                );
                ensure!(
                    presented < current && current <= max,
                    "fenced {presented} with current {current} (greatest racer {max})"
                );
            }
            Seen::Other(error) => {
                return Err(Failure::new(format!(
                    "racing write of token {token}: {error}"
                )))
            }
        }
    }
    let holders_of_max = (0..tokens.len())
        .filter(|&w| reacquired(tokens, w, last_round) == max)
        .count();
    ensure!(
        accepted_at_max == holders_of_max,
        "every write of the greatest token {max} must be accepted: {accepted_at_max} of {holders_of_max}"
    );
    let writes = check_revision_order(writes, false)?;
    check_final_value(&*clients(), domain, writes.last(), max).await?;
    Ok(Verdict::Passed)
}

pub(crate) async fn strict_rounds(
    clients: Clients<'_>,
    domain: &Domain,
    writers: usize,
    rounds: usize,
) -> ScenarioResult {
    let mut last = None;
    for round in 1..=rounds as u64 {
        let barrier = Arc::new(Barrier::new(writers));
        let mut set = JoinSet::new();
        for writer in 0..writers {
            let (store, domain, barrier) = (clients(), domain.clone(), barrier.clone());
            set.spawn(async move {
                let token = FencingToken::new(round).map_err(FenceError::from)?;
                let value = Bytes::from(format!("round {round} writer {writer}"));
                let request = WriteRequest::put(domain, token, value.clone())
                    .with_policy(EqualTokenPolicy::Strict);
                barrier.wait().await;
                Ok::<_, FenceError>((value, store.write(&request).await))
            });
        }
        let mut winners = Vec::new();
        for joined in join_all(set).await? {
            let (value, result) = joined?;
            match classify(result, write_accepted) {
                Seen::Accepted(accepted) => winners.push((accepted, value)),
                Seen::Fenced { presented, current } => ensure!(
                    presented == round && current == round,
                    "round {round}: loser fenced with presented {presented}, current {current}"
                ),
                Seen::Other(error) => return Err(Failure::new(format!("round {round}: {error}"))),
            }
        }
        ensure!(
            winners.len() == 1,
            "round {round}: exactly one strict writer may win, {} did",
            winners.len()
        );
        let (accepted, value) = winners.remove(0);
        let expected_previous = if round == 1 {
            None
        } else {
            Some(t(round - 1)?)
        };
        ensure!(
            accepted.revision.get() == round
                && accepted.previous_high_water_mark == expected_previous,
            "round {round}: winner outcome {accepted:?}"
        );
        last = Some((accepted, value));
    }
    check_final_value(&*clients(), domain, last.as_ref(), rounds as u64).await?;
    Ok(Verdict::Passed)
}

pub(crate) async fn claims_and_writes(
    clients: Clients<'_>,
    domain: &Domain,
    racers: usize,
    rounds: usize,
) -> ScenarioResult {
    let barrier = Arc::new(Barrier::new(racers));
    let mut set = JoinSet::new();
    for racer in 0..racers {
        let (store, domain, barrier) = (clients(), domain.clone(), barrier.clone());
        set.spawn(async move {
            barrier.wait().await;
            let mut writes = Vec::new();
            let mut claims = Vec::new();
            for round in 0..rounds {
                // Tokens rise over time and interleave between racers.
                let Ok(token) = FencingToken::new((round as u64) * 3 + (racer as u64 % 4) + 1)
                else {
                    continue;
                };
                if racer % 2 == 0 {
                    let value = Bytes::from(format!("racer {racer} round {round}"));
                    let result = store
                        .write(&WriteRequest::put(domain.clone(), token, value.clone()))
                        .await;
                    writes.push((
                        token.get(),
                        classify(result, |o| write_accepted(o).map(|a| (a, value))),
                    ));
                } else {
                    let result = store.claim(&domain, token).await;
                    claims.push((token.get(), classify(result, Some)));
                }
            }
            (writes, claims)
        });
    }
    let mut accepted_writes = Vec::new();
    let mut greatest = 0;
    for (writes, claims) in join_all(set).await? {
        for (token, seen) in writes {
            match seen {
                Seen::Accepted((accepted, value)) => {
                    greatest = greatest.max(token);
                    accepted_writes.push((accepted, value));
                }
                Seen::Fenced { presented, current } => {
                    ensure!(
                        presented == token && presented < current,
                        "write {token} fenced with current {current}"
                    )
                }
                Seen::Other(error) => {
                    return Err(Failure::new(format!("racing write {token}: {error}")))
                }
            }
        }
        for (token, seen) in claims {
            match seen {
                Seen::Accepted(claimed) => {
                    ensure!(
                        claimed
                            .previous_high_water_mark
                            .is_none_or(|mark| mark <= claimed.token),
                        "claim {token} accepted above its token: {claimed:?}"
                    );
                    greatest = greatest.max(token);
                }
                Seen::Fenced { presented, current } => {
                    ensure!(
                        presented == token && presented < current,
                        "claim {token} fenced with current {current}"
                    )
                }
                Seen::Other(error) => {
                    return Err(Failure::new(format!("racing claim {token}: {error}")))
                }
            }
        }
    }
    let writes = check_revision_order(accepted_writes, true)?;
    check_final_value(&*clients(), domain, writes.last(), greatest).await?;
    Ok(Verdict::Passed)
}

pub(crate) async fn log_race(
    log: Arc<dyn FencedLog>,
    domain: &Domain,
    tokens: &[u64],
    rounds: usize,
) -> ScenarioResult {
    let barrier = Arc::new(Barrier::new(tokens.len()));
    let mut set = JoinSet::new();
    let shared: Arc<[u64]> = tokens.into();
    for appender in 0..tokens.len() {
        let (log, domain, barrier) = (log.clone(), domain.clone(), barrier.clone());
        let tokens = shared.clone();
        set.spawn(async move {
            let mut seen = Vec::new();
            barrier.wait().await;
            for round in 0..rounds {
                let Ok(token) = FencingToken::new(reacquired(&tokens, appender, round)) else {
                    return seen;
                };
                let batch: Vec<Bytes> = (0..2)
                    .map(|part| {
                        Bytes::from(format!(
                            "appender {appender} token {token} round {round} part {part}"
                        ))
                    })
                    .collect();
                let records = batch.iter().cloned().map(Record::new).collect();
                let result = log
                    .append(&AppendRequest::new(domain.clone(), token, records))
                    .await;
                let outcome = classify(result, |o| match o {
                    AppendOutcome::Appended(appended) => Some(appended),
                    _ => None,
                });
                seen.push((token.get(), batch, outcome));
            }
            seen
        });
    }
    let mut expected: HashMap<Bytes, u64> = HashMap::new();
    let mut refused: Vec<Bytes> = Vec::new();
    let last_round = rounds.saturating_sub(1);
    let max = (0..tokens.len())
        .map(|a| reacquired(tokens, a, last_round))
        .max()
        .unwrap_or(1);
    for (token, batch, seen) in join_all(set).await?.into_iter().flatten() {
        match seen {
            Seen::Accepted(appended) => {
                ensure!(
                    appended.records == batch.len() && appended.token.get() == token,
                    "append outcome {appended:?}"
                );
                if let Some(mark) = appended.previous_high_water_mark {
                    ensure!(
                        mark.get() <= token,
                        "append {token} accepted while the mark was {mark}"
                    );
                }
                expected.extend(batch.into_iter().map(|value| (value, token)));
            }
            Seen::Fenced { presented, current } => {
                ensure!(
                    presented == token && token < current && current <= max,
                    "append {token} fenced with current {current}"
                );
                ensure!(
                    token != max,
                    "an append of the greatest token {max} was fenced"
                );
                refused.extend(batch);
            }
            Seen::Other(error) => {
                return Err(Failure::new(format!("racing append {token}: {error}")))
            }
        }
    }
    let entries = log.read_log(domain).await?;
    ensure!(
        entries.len() == expected.len(),
        "the log must hold exactly the {} accepted records, it holds {}",
        expected.len(),
        entries.len()
    );
    let mut previous = 0;
    let mut position: HashMap<&Bytes, usize> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let token = entry.token.get();
        ensure!(
            token >= previous,
            "tokens went down along the log: {previous} then {token}"
        );
        previous = token;
        ensure!(
            expected.get(&entry.record.value) == Some(&token),
            "record {:?} with token {token} was not an accepted append",
            String::from_utf8_lossy(&entry.record.value)
        );
        ensure!(
            position.insert(&entry.record.value, index).is_none(),
            "record appears twice"
        );
    }
    for value in &refused {
        ensure!(
            !position.contains_key(value),
            "a fenced record is visible: {value:?}"
        );
    }
    for (value, index) in &position {
        if value.ends_with(b"part 1") {
            let first = Bytes::from([&value[..value.len() - 1], b"0"].concat());
            ensure!(
                position.get(&first).is_some_and(|i| i < index),
                "batch order broken for {value:?}"
            );
        }
    }
    let hwm = log.high_water_mark(domain).await?;
    ensure!(
        hwm == Some(t(max)?),
        "final mark must be {max}, got {hwm:?}"
    );
    Ok(Verdict::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_tokens_mix_for_every_writer_count() {
        for writers in 2..=16 {
            let tokens = mixed_tokens(writers);
            let distinct: std::collections::HashSet<_> = tokens.iter().collect();
            assert!(distinct.len() >= 2, "{writers} writers: {tokens:?}");
        }
        assert_eq!(mixed_tokens(10), [1, 8, 7, 6, 5, 4, 3, 2, 1, 8]);
        assert_eq!(mixed_tokens(3), [1, 2, 1]);
    }

    #[test]
    fn reacquired_tokens_rise_across_rounds_and_mix_within_one() {
        let tokens = mixed_tokens(3);
        assert_eq!(
            (0..3)
                .map(|w| reacquired(&tokens, w, 0))
                .collect::<Vec<_>>(),
            [1, 2, 1]
        );
        assert_eq!(
            (0..3)
                .map(|w| reacquired(&tokens, w, 2))
                .collect::<Vec<_>>(),
            [5, 6, 5]
        );
    }
}
