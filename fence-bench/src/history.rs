//! Every run's ratios, appended to `history.jsonl`, and `HISTORY.md`: one line per case, one
//! column per recent run, so a regression shows at a glance.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::report::Row;

/// Runs shown in `HISTORY.md` (the file keeps them all).
const SHOWN_RUNS: usize = 8;

/// One case of one run.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    run: String,
    backend: String,
    case: String,
    concurrency: usize,
    latency_ratio: Option<f64>,
    throughput_ratio: Option<f64>,
}

/// Appends `rows` (compared cases only) under `run` (a date and commit) to `dir/history.jsonl`,
/// then rewrites `dir/HISTORY.md` from the whole file.
pub(crate) fn append(dir: &Path, run: &str, rows: &[Row]) -> Result<(), String> {
    let file = dir.join("history.jsonl");
    let mut lines = String::new();
    for r in rows {
        let Some(concurrency) = r.concurrency else {
            continue;
        };
        let entry = Entry {
            run: run.to_owned(),
            backend: r.backend.clone(),
            case: r.case.clone(),
            concurrency,
            latency_ratio: r.latency_ratio,
            throughput_ratio: r.throughput_ratio,
        };
        let line = serde_json::to_string(&entry).map_err(|e| e.to_string())?;
        lines.push_str(&line);
        lines.push('\n');
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .map_err(|e| format!("could not append to {}: {e}", file.display()))?;
    let all = std::fs::read_to_string(&file)
        .map_err(|e| format!("could not read {}: {e}", file.display()))?;
    let entries: Vec<Entry> = all
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} has a malformed line: {e}", file.display()))?;
    let markdown = render(&entries);
    let out = dir.join("HISTORY.md");
    std::fs::write(&out, markdown).map_err(|e| format!("could not write {}: {e}", out.display()))
}

fn render(entries: &[Entry]) -> String {
    let mut runs: Vec<&str> = Vec::new();
    for e in entries {
        if !runs.contains(&e.run.as_str()) {
            runs.push(&e.run);
        }
    }
    let shown = &runs[runs.len().saturating_sub(SHOWN_RUNS)..];
    // (backend, case, concurrency) → run → throughput ratio; cases in first-seen order.
    let mut order: Vec<(String, String, usize)> = Vec::new();
    let mut cells: BTreeMap<(String, String, usize), BTreeMap<&str, Option<f64>>> = BTreeMap::new();
    for e in entries.iter().filter(|e| shown.contains(&e.run.as_str())) {
        let key = (e.backend.clone(), e.case.clone(), e.concurrency);
        if !order.contains(&key) {
            order.push(key.clone());
        }
        cells
            .entry(key)
            .or_default()
            .insert(&e.run, e.throughput_ratio);
    }
    let mut out = String::from(
        "# Benchmark history\n\nThroughput ratio (fenced / unfenced; 1.00 = no cost) of each case in the last runs of\n`scripts/bench`, oldest first. Written by fence-bench from `history.jsonl` (every run, both\nratios); see BENCHMARKS.md for the method.\n\n| backend | case | concurrency |",
    );
    for run in shown {
        let _ = write!(out, " {run} |");
    }
    out.push_str("\n|---|---|---:|");
    out.push_str(&"---:|".repeat(shown.len()));
    out.push('\n');
    for key in &order {
        let _ = write!(out, "| {} | {} | {} |", key.0, key.1, key.2);
        for run in shown {
            match cells.get(key).and_then(|c| c.get(run)).copied().flatten() {
                Some(ratio) => {
                    let _ = write!(out, " {ratio:.2} |");
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(run: &str, ratio: f64) -> Entry {
        Entry {
            run: run.into(),
            backend: "redis".into(),
            case: "write".into(),
            concurrency: 16,
            latency_ratio: None,
            throughput_ratio: Some(ratio),
        }
    }

    #[test]
    fn each_case_is_a_line_and_each_run_a_column() {
        let text = render(&[entry("run-1", 0.73), entry("run-2", 0.91)]);
        assert!(
            text.contains("| backend | case | concurrency | run-1 | run-2 |"),
            "{text}"
        );
        assert!(
            text.contains("| redis | write | 16 | 0.73 | 0.91 |"),
            "{text}"
        );
    }
}
