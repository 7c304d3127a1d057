//! The checker on histories written by hand: a correct one holds, and each property catches
//! the defect it is about, with the events that show it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_torture::{
    check, Event, History, LoggedRecord, Op, Outcome, Property, SeenEntry, Verdict,
};

fn put(worker: usize, token: u64, value: u64, at: (u64, u64), outcome: Outcome) -> Event {
    Event {
        worker,
        window: 0,
        op: Op::Write {
            token,
            value: Some(value),
            op_id: Some(format!("op-{value}")),
        },
        invoked: at.0,
        completed: at.1,
        outcome,
    }
}

fn claim(worker: usize, token: u64, at: (u64, u64), outcome: Outcome) -> Event {
    Event {
        worker,
        window: 0,
        op: Op::Claim { token },
        invoked: at.0,
        completed: at.1,
        outcome,
    }
}

fn read(worker: usize, at: (u64, u64), mark: Option<u64>, entry: SeenEntry) -> Event {
    Event {
        worker,
        window: 0,
        op: Op::Read,
        invoked: at.0,
        completed: at.1,
        outcome: Outcome::Read { mark, entry },
    }
}

fn written(revision: u64, previous: Option<u64>) -> Outcome {
    Outcome::Written { revision, previous }
}

fn value(value: u64, token: u64, revision: u64) -> SeenEntry {
    SeenEntry::Value {
        value,
        token,
        revision,
    }
}

fn history(events: Vec<Event>, final_state: (Option<u64>, SeenEntry)) -> History {
    History {
        events,
        final_state: Some(final_state),
        ..History::default()
    }
}

/// A takeover: A writes with 1, B claims 2 and writes, A's late write is fenced.
fn takeover() -> Vec<Event> {
    vec![
        claim(0, 1, (0, 10), Outcome::Claimed { previous: None }),
        put(0, 1, 100, (20, 30), written(1, Some(1))),
        claim(1, 2, (40, 50), Outcome::Claimed { previous: Some(1) }),
        put(1, 2, 200, (60, 70), written(2, Some(2))),
        put(0, 1, 101, (80, 90), Outcome::Fenced { current: 2 }),
        read(1, (100, 110), Some(2), value(200, 2, 2)),
    ]
}

#[test]
fn a_correct_history_holds() {
    let report = check(&history(takeover(), (Some(2), value(200, 2, 2))));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!(
        (report.operations, report.accepted, report.fenced),
        (6, 4, 1)
    );
    assert_eq!(report.windows_checked, 1);
}

#[test]
fn a_stale_write_accepted_is_caught() {
    let mut events = takeover();
    // The zombie's write is accepted after B's write completed: below the mark.
    events[4] = put(0, 1, 101, (80, 90), written(3, Some(2)));
    let report = check(&history(events, (Some(2), value(101, 1, 3))));
    assert!(
        report.violated().contains(&Property::StaleAccepted),
        "{report:?}"
    );
    let shown = &report
        .violations
        .iter()
        .find(|v| v.property == Property::StaleAccepted)
        .unwrap()
        .window;
    assert!(
        shown
            .iter()
            .any(|e| e.op.token() == Some(1) && e.invoked == 80),
        "{shown:?}"
    );
}

#[test]
fn a_stale_write_that_reports_a_fresh_mark_is_still_caught() {
    let mut events = takeover();
    // The store lies about the previous mark, but B's token 2 completed before token 1 began.
    events[4] = put(0, 1, 101, (80, 90), written(3, Some(1)));
    let report = check(&history(events, (Some(2), value(101, 1, 3))));
    assert!(
        report.violated().contains(&Property::StaleAccepted),
        "{report:?}"
    );
}

#[test]
fn a_mark_that_goes_down_is_caught() {
    let mut events = takeover();
    events[5] = read(1, (100, 110), Some(1), value(200, 2, 2));
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(
        report.violated().contains(&Property::MarkDecreased),
        "{report:?}"
    );
}

#[test]
fn an_acknowledged_write_lost_is_caught() {
    // Two writes acknowledged at one revision: one of them was lost.
    let events = vec![
        claim(0, 1, (0, 10), Outcome::Claimed { previous: None }),
        put(0, 1, 100, (20, 30), written(1, Some(1))),
        put(0, 1, 101, (40, 50), written(1, Some(1))),
    ];
    let report = check(&history(events, (Some(1), value(101, 1, 1))));
    assert!(
        report.violated().contains(&Property::LostWrite),
        "{report:?}"
    );

    // A read behind an acknowledged revision.
    let mut events = takeover();
    events[5] = read(1, (100, 110), Some(2), value(100, 1, 1));
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(
        report.violated().contains(&Property::LostWrite),
        "{report:?}"
    );
}

#[test]
fn a_final_state_other_than_the_last_write_is_caught() {
    let report = check(&history(takeover(), (Some(2), value(100, 1, 1))));
    assert!(
        report.violated().contains(&Property::FinalState),
        "{report:?}"
    );
    // A final mark below an applied token: an acknowledged mark was lost (a restart).
    let report = check(&history(takeover(), (Some(1), value(200, 2, 2))));
    assert!(
        report.violated().contains(&Property::FinalState),
        "{report:?}"
    );
    // A final value nobody wrote.
    let report = check(&history(takeover(), (Some(2), value(999, 2, 3))));
    assert!(
        report.violated().contains(&Property::FinalState),
        "{report:?}"
    );
}

#[test]
fn refusals_against_the_rule_and_forged_marks_are_caught() {
    let mut events = takeover();
    // Token 2 refused by a mark of 2: the same-owner rule accepts it.
    events.push(put(1, 2, 201, (120, 130), Outcome::Fenced { current: 2 }));
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(
        report.violated().contains(&Property::WrongRefusal),
        "{report:?}"
    );

    let mut events = takeover();
    events[4] = put(0, 1, 101, (80, 90), Outcome::Fenced { current: 77 });
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(
        report.violated().contains(&Property::WrongRefusal),
        "{report:?}"
    );
}

#[test]
fn answers_no_order_explains_are_not_linearizable() {
    // A read overlapping the only write saw that write's mark without its entry: each answer
    // alone passes every other check, no order gives both.
    let events = vec![
        read(0, (0, 100), Some(3), SeenEntry::Absent),
        put(1, 3, 100, (10, 20), written(1, None)),
    ];
    let report = check(&history(events, (Some(3), value(100, 3, 1))));
    assert_eq!(
        report.violated(),
        [Property::NotLinearizable].into(),
        "{report:?}"
    );
}

#[test]
fn concurrent_answers_are_explained_by_some_order() {
    // B's claim overlaps A's write: A's write saw the mark before the claim, and a read that
    // overlaps both saw the claim first — linearizable with claim(2) before the read.
    let events = vec![
        claim(0, 1, (0, 10), Outcome::Claimed { previous: None }),
        put(0, 1, 100, (20, 60), written(1, Some(1))),
        claim(1, 2, (25, 50), Outcome::Claimed { previous: Some(1) }),
        read(2, (30, 40), Some(2), SeenEntry::Absent),
    ];
    // The write must come after the read (it saw no entry) but its previous mark is 1, so the
    // claim of 2 must come after it: the read saw 2 before the claim — no order works.
    let report = check(&history(events.clone(), (Some(2), value(100, 1, 1))));
    assert_eq!(
        report.violated(),
        [Property::NotLinearizable].into_iter().collect(),
        "{report:?}"
    );

    let mut ok = events;
    ok[3] = read(2, (30, 40), Some(1), SeenEntry::Absent);
    let report = check(&history(ok, (Some(2), value(100, 1, 1))));
    assert!(report.holds(), "{:?}", report.violations);
}

#[test]
fn ambiguous_writes_are_resolved_by_retries_and_reads() {
    let mut events = takeover();
    // B's write times out; its retry with the same op id answers Duplicate: it applied.
    events[3] = put(1, 2, 200, (60, 70), Outcome::Ambiguous);
    events.insert(
        4,
        put(
            1,
            2,
            200,
            (72, 75),
            Outcome::Duplicate {
                revision: 2,
                previous: Some(2),
            },
        ),
    );
    let report = check(&history(events.clone(), (Some(2), value(200, 2, 2))));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!((report.ambiguity.total, report.ambiguity.applied), (1, 1));

    // The retry applied instead: the first attempt did not.
    events[4] = put(1, 2, 200, (72, 75), written(2, Some(2)));
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!(report.ambiguity.not_applied, 1);

    // Unresolved: the final value may still be that write's.
    let mut events = takeover();
    events[3] = put(1, 2, 200, (60, 70), Outcome::Ambiguous);
    events.pop();
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!(report.ambiguity.applied, 0);
}

#[test]
fn an_ambiguous_write_shown_applied_must_be_placed_in_its_window() {
    // A's write of 100 times out; its retry answers Duplicate at revision 1: it applied. B's
    // later write with token 1 answers revision 1 over no previous mark, as if A's never had.
    // Only a search that must place A's write (before the retry's answer) refutes that order.
    let events = vec![
        put(0, 1, 100, (0, 10), Outcome::Ambiguous),
        put(
            0,
            1,
            100,
            (20, 30),
            Outcome::Duplicate {
                revision: 1,
                previous: None,
            },
        ),
        put(1, 1, 200, (40, 50), written(1, None)),
    ];
    let report = check(&history(events, (Some(1), value(200, 1, 1))));
    assert_eq!(report.ambiguity.applied, 1, "{report:?}");
    // Other properties see the lost write too; the search must see it on its own.
    assert!(
        report.violated().contains(&Property::NotLinearizable),
        "{report:?}"
    );
}

#[test]
fn several_ambiguous_attempts_of_one_operation_apply_once() {
    // B's write times out twice; the third attempt answers Duplicate: one write, at revision 2.
    let mut events = takeover();
    events[3] = put(1, 2, 200, (60, 64), Outcome::Ambiguous);
    events.insert(4, put(1, 2, 200, (65, 69), Outcome::Ambiguous));
    events.insert(
        5,
        put(
            1,
            2,
            200,
            (70, 75),
            Outcome::Duplicate {
                revision: 2,
                previous: Some(2),
            },
        ),
    );
    let report = check(&history(events, (Some(2), value(200, 2, 2))));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!((report.ambiguity.applied, report.ambiguity.repeats), (1, 1));
}

#[test]
fn a_refusal_from_a_cache_may_name_an_older_mark_only_where_the_store_says_so() {
    // After B's claim of 3 completed, A is refused with the mark 2 a cache still held.
    let mut events = takeover();
    events.push(claim(
        1,
        3,
        (120, 130),
        Outcome::Claimed { previous: Some(2) },
    ));
    events.push(put(0, 1, 102, (140, 150), Outcome::Fenced { current: 2 }));
    let exact = history(events.clone(), (Some(3), value(200, 2, 2)));
    let report = check(&exact);
    assert!(
        report.violated().contains(&Property::MarkDecreased),
        "{report:?}"
    );
    assert!(
        report.violated().contains(&Property::NotLinearizable),
        "{report:?}"
    );
    let cached = History {
        refusals_from_cache: true,
        ..exact
    };
    let report = check(&cached);
    assert!(report.holds(), "{:?}", report.violations);
    // Even from a cache, a refusal must name a mark above the token, and one someone presented.
    let mut events = takeover();
    events.push(put(0, 1, 103, (140, 150), Outcome::Fenced { current: 1 }));
    let report = check(&History {
        refusals_from_cache: true,
        ..history(events, (Some(2), value(200, 2, 2)))
    });
    assert!(
        report.violated().contains(&Property::WrongRefusal),
        "{report:?}"
    );
}

fn append(worker: usize, token: u64, values: &[u64], at: (u64, u64), outcome: Outcome) -> Event {
    Event {
        worker,
        window: 0,
        op: Op::Append {
            token,
            values: values.to_vec(),
            op_id: Some(format!("batch-{}", values[0])),
        },
        invoked: at.0,
        completed: at.1,
        outcome,
    }
}

fn committed(previous: Option<u64>) -> Outcome {
    Outcome::Appended {
        previous,
        duplicate: false,
    }
}

/// A log takeover: A appends with 1, B claims 2 and appends, A's late batch is fenced, and an
/// ambiguous batch of B's is settled by the final records.
fn log_takeover() -> Vec<Event> {
    vec![
        claim(0, 1, (0, 10), Outcome::Claimed { previous: None }),
        append(0, 1, &[10, 11], (20, 30), committed(Some(1))),
        claim(1, 2, (40, 50), Outcome::Claimed { previous: Some(1) }),
        append(1, 2, &[20], (60, 70), committed(Some(2))),
        append(0, 1, &[12, 13], (80, 90), Outcome::Fenced { current: 2 }),
        append(1, 2, &[21, 22], (100, 110), Outcome::Ambiguous),
        read(1, (120, 130), Some(2), SeenEntry::Absent),
    ]
}

fn records(records: &[(u64, u64)]) -> Vec<LoggedRecord> {
    records
        .iter()
        .map(|&(token, value)| LoggedRecord { token, value })
        .collect()
}

fn log_history(events: Vec<Event>, log: &[(u64, u64)]) -> History {
    History {
        events,
        final_state: Some((Some(2), SeenEntry::Absent)),
        final_log: Some(records(log)),
        ..History::default()
    }
}

const GOOD_LOG: [(u64, u64); 5] = [(1, 10), (1, 11), (2, 20), (2, 21), (2, 22)];

#[test]
fn a_correct_log_history_holds_and_settles_its_ambiguous_batch() {
    let report = check(&log_history(log_takeover(), &GOOD_LOG));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!((report.accepted, report.fenced), (4, 1));
    assert_eq!((report.ambiguity.total, report.ambiguity.applied), (1, 1));
    assert_eq!(report.windows_checked, 1);
    // The same history without B's ambiguous batch in the log: it did not commit.
    let report = check(&log_history(log_takeover(), &GOOD_LOG[..3]));
    assert!(report.holds(), "{:?}", report.violations);
    assert_eq!(report.ambiguity.not_applied, 1);
}

#[test]
fn a_log_whose_tokens_decrease_is_caught() {
    // The zombie's batch committed after B's: token 1 after token 2.
    let mut events = log_takeover();
    events[4] = append(0, 1, &[12, 13], (80, 90), committed(Some(2)));
    let log = [(1, 10), (1, 11), (2, 20), (1, 12), (1, 13)];
    let report = check(&log_history(events, &log));
    let violated = report.violated();
    assert!(violated.contains(&Property::LogOrder), "{report:?}");
    assert!(violated.contains(&Property::StaleAccepted), "{report:?}");
}

#[test]
fn a_fenced_batch_visible_to_readers_is_caught() {
    // The broker answered "fenced" but the zombie's records are there (an aborted batch seen).
    let log = [(1, 10), (1, 11), (1, 12), (1, 13), (2, 20)];
    let report = check(&log_history(log_takeover(), &log));
    assert_eq!(
        report.violated(),
        [Property::FencedVisible].into_iter().collect(),
        "{report:?}"
    );
    let shown = &report.violations[0].window;
    assert!(
        shown
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Fenced { .. })),
        "{shown:?}"
    );
}

#[test]
fn a_lost_torn_or_repeated_batch_is_caught() {
    // B's acknowledged batch [20] is missing.
    let report = check(&log_history(log_takeover(), &[(1, 10), (1, 11)]));
    assert!(
        report.violated().contains(&Property::LostWrite),
        "{report:?}"
    );
    // A's batch [10, 11] torn: only its first record committed.
    let report = check(&log_history(log_takeover(), &[(1, 10), (2, 20)]));
    assert!(
        report.violated().contains(&Property::LogOrder),
        "{report:?}"
    );
    // B's ambiguous batch committed twice (a retry that appended again).
    let twice = [GOOD_LOG.as_slice(), &GOOD_LOG[3..]].concat();
    let report = check(&log_history(log_takeover(), &twice));
    assert!(
        report.violated().contains(&Property::LogOrder),
        "{report:?}"
    );
    // A record no worker appended.
    let report = check(&log_history(
        log_takeover(),
        &[(1, 10), (1, 11), (2, 20), (2, 99)],
    ));
    assert!(
        report.violated().contains(&Property::FinalState),
        "{report:?}"
    );
}

/// Window 0, too large to search: 129 concurrent reads, then a claim of 2.
fn too_large_window() -> Vec<Event> {
    let mut events: Vec<Event> = (0..129)
        .map(|i| read(i % 4, (i as u64, 1000), None, SeenEntry::Absent))
        .collect();
    events.push(claim(
        0,
        2,
        (1100, 1110),
        Outcome::Claimed { previous: None },
    ));
    events
}

#[test]
fn the_search_restarts_from_the_anchor_read_after_a_window_it_gave_up_on() {
    // Window 0 is too large to search (129 concurrent reads); window 1 starts with the engine's
    // anchor read, then holds a write whose revision a later read does not show.
    let events = too_large_window();
    let mut next = vec![
        read(0, (2000, 2010), Some(2), SeenEntry::Absent),
        put(0, 2, 7, (2020, 2030), written(1, Some(2))),
        read(1, (2040, 2050), Some(2), value(7, 2, 1)),
    ];
    for event in &mut next {
        event.window = 1;
    }
    let good = history(
        events.iter().cloned().chain(next.clone()).collect(),
        (Some(2), value(7, 2, 1)),
    );
    let report = check(&good);
    // Nothing violated, but window 0 went unsearched: inconclusive, not holding.
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.verdict(), Verdict::Inconclusive);
    assert!(!report.holds());
    assert_eq!((report.windows_skipped, report.windows_checked), (1, 1));
    // The same second window, its last read answering a state no order gives: caught there.
    next[2].outcome = Outcome::Read {
        mark: Some(2),
        entry: value(8, 2, 1),
    };
    let bad = history(
        events.into_iter().chain(next).collect(),
        (Some(2), value(7, 2, 1)),
    );
    let report = check(&bad);
    assert!(
        report.violated().contains(&Property::NotLinearizable),
        "{report:?}"
    );
}

#[test]
fn ambiguous_operations_of_a_skipped_window_may_apply_after_the_anchor() {
    // Window 0: too large, and holds a put whose answer was lost (no op id, never retried).
    let mut events = too_large_window();
    let mut lost = put(1, 2, 9, (1120, 1130), Outcome::Ambiguous);
    lost.op = Op::Write {
        token: 2,
        value: Some(9),
        op_id: None,
    };
    events.push(lost);
    // Window 1: the anchor still sees nothing written; the lost put lands after it.
    let mut next = vec![
        read(0, (2000, 2010), Some(2), SeenEntry::Absent),
        read(1, (2040, 2050), Some(2), value(9, 2, 1)),
    ];
    for event in &mut next {
        event.window = 1;
    }
    let all: Vec<Event> = events.iter().cloned().chain(next.clone()).collect();
    let report = check(&history(all, (Some(2), value(9, 2, 1))));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.verdict(), Verdict::Inconclusive);
    assert_eq!((report.windows_skipped, report.windows_checked), (1, 1));
    // Without an anchor (its read failed, and what remains begins with a claim that overlaps
    // the read), window 1 has no known start and is skipped too.
    next[0].outcome = Outcome::Failed("no answer".into());
    let mut overlapping = claim(2, 3, (2030, 2060), Outcome::Claimed { previous: Some(2) });
    overlapping.window = 1;
    next.push(overlapping);
    let all: Vec<Event> = events.into_iter().chain(next).collect();
    let report = check(&history(all, (Some(3), value(9, 2, 1))));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.verdict(), Verdict::Inconclusive);
    assert_eq!((report.windows_skipped, report.windows_checked), (2, 0));
}
