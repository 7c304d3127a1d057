//! One row per case: `report.json` for machines (and the chart), tables for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::measure::Side;
use crate::probe::Cost;

/// One Redis command's share of an operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CommandCost {
    pub(crate) calls_per_op: f64,
    pub(crate) usec_per_call: f64,
}

/// A compared case.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) backend: String,
    pub(crate) case: String,
    pub(crate) concurrency: Option<usize>,
    pub(crate) fenced_p50_us: Option<f64>,
    pub(crate) unfenced_p50_us: Option<f64>,
    pub(crate) latency_ratio: Option<f64>,
    pub(crate) fenced_ops_s: Option<f64>,
    pub(crate) unfenced_ops_s: Option<f64>,
    pub(crate) throughput_ratio: Option<f64>,
    pub(crate) fenced_p99_us: Option<f64>,
    pub(crate) unfenced_p99_us: Option<f64>,
    /// Server CPU per operation (all the server's threads and worker processes).
    pub(crate) fenced_server_cpu_us: Option<f64>,
    pub(crate) unfenced_server_cpu_us: Option<f64>,
    /// This client's CPU per operation (the whole benchmark process).
    pub(crate) fenced_client_cpu_us: Option<f64>,
    pub(crate) unfenced_client_cpu_us: Option<f64>,
    pub(crate) requests_per_write: Option<f64>,
    /// Redis `INFO commandstats` per operation, by command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fenced_commands: BTreeMap<String, CommandCost>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) unfenced_commands: BTreeMap<String, CommandCost>,
    /// Case-specific figures (bytes or records per transaction, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) figures: BTreeMap<String, f64>,
    pub(crate) note: Option<String>,
}

fn per_op(total_ns: Option<u64>, ops: usize) -> Option<f64> {
    (ops > 0).then_some(total_ns? as f64 / 1e3 / ops as f64)
}

fn commands(cost: &Cost, ops: usize) -> BTreeMap<String, CommandCost> {
    cost.commands
        .iter()
        .filter(|_| ops > 0)
        .map(|(name, &(calls, usec))| {
            let cost = CommandCost {
                calls_per_op: calls as f64 / ops as f64,
                usec_per_call: usec as f64 / calls.max(1) as f64,
            };
            (name.clone(), cost)
        })
        .collect()
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    let r = a? / b?;
    r.is_finite().then_some(r)
}

impl Row {
    pub(crate) fn new(
        backend: &str,
        case: impl Into<String>,
        concurrency: usize,
        fenced: &Side,
        unfenced: &Side,
    ) -> Self {
        let failures: Vec<&String> = fenced.failures.iter().chain(&unfenced.failures).collect();
        let (f_ops, u_ops) = (fenced.ops(), unfenced.ops());
        let mut row = Row {
            backend: backend.to_owned(),
            case: case.into(),
            concurrency: Some(concurrency),
            fenced_p50_us: fenced.p(0.5),
            unfenced_p50_us: unfenced.p(0.5),
            fenced_p99_us: fenced.p(0.99),
            unfenced_p99_us: unfenced.p(0.99),
            fenced_ops_s: fenced.ops_per_second(),
            unfenced_ops_s: unfenced.ops_per_second(),
            fenced_server_cpu_us: per_op(fenced.cost.server_ns, f_ops),
            unfenced_server_cpu_us: per_op(unfenced.cost.server_ns, u_ops),
            fenced_client_cpu_us: per_op(Some(fenced.cost.client_ns), f_ops),
            unfenced_client_cpu_us: per_op(Some(unfenced.cost.client_ns), u_ops),
            fenced_commands: commands(&fenced.cost, f_ops),
            unfenced_commands: commands(&unfenced.cost, u_ops),
            note: (!failures.is_empty()).then(|| {
                format!(
                    "{} failed operations, first: {}",
                    failures.len(),
                    failures[0]
                )
            }),
            ..Row::default()
        };
        row.latency_ratio = ratio(row.fenced_p50_us, row.unfenced_p50_us);
        row.throughput_ratio = ratio(row.fenced_ops_s, row.unfenced_ops_s);
        row
    }

    /// A figure rather than a comparison (or a case that could not run): `note` says it.
    pub(crate) fn note(backend: &str, case: impl Into<String>, note: impl Into<String>) -> Self {
        Row {
            backend: backend.to_owned(),
            case: case.into(),
            note: Some(note.into()),
            ..Row::default()
        }
    }
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

fn pair(a: Option<f64>, b: Option<f64>) -> String {
    if a.is_none() && b.is_none() {
        return "-".to_owned();
    }
    format!("{} / {}", cell(a, 1), cell(b, 1))
}

/// The report as a Markdown table, then the Redis command breakdown and the notes.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| backend | case | concurrency | fenced p50 µs | unfenced p50 µs | latency ratio | fenced ops/s | unfenced ops/s | throughput ratio | server CPU µs/op (fenced / unfenced) | client CPU µs/op (fenced / unfenced) | requests/write |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows.iter().filter(|r| r.concurrency.is_some()) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            r.case,
            r.concurrency
                .map_or_else(|| "-".to_owned(), |c| c.to_string()),
            cell(r.fenced_p50_us, 1),
            cell(r.unfenced_p50_us, 1),
            cell(r.latency_ratio, 2),
            cell(r.fenced_ops_s, 0),
            cell(r.unfenced_ops_s, 0),
            cell(r.throughput_ratio, 2),
            pair(r.fenced_server_cpu_us, r.unfenced_server_cpu_us),
            pair(r.fenced_client_cpu_us, r.unfenced_client_cpu_us),
            cell(r.requests_per_write, 2),
        );
    }
    let with_commands: Vec<&Row> = rows
        .iter()
        .filter(|r| !r.fenced_commands.is_empty() || !r.unfenced_commands.is_empty())
        .collect();
    if !with_commands.is_empty() {
        out.push_str(
            "\nServer time by command (`INFO commandstats`; µs/op = calls/op × µs/call):\n\n| case | concurrency | side | command | calls/op | µs/call | µs/op |\n|---|---:|---|---|---:|---:|---:|\n",
        );
        for r in with_commands {
            for (side, commands) in [
                ("fenced", &r.fenced_commands),
                ("unfenced", &r.unfenced_commands),
            ] {
                for (name, c) in commands {
                    let _ = writeln!(
                        out,
                        "| {} {} | {} | {side} | {name} | {:.2} | {:.2} | {:.2} |",
                        r.backend,
                        r.case,
                        r.concurrency.unwrap_or(0),
                        c.calls_per_op,
                        c.usec_per_call,
                        c.calls_per_op * c.usec_per_call,
                    );
                }
            }
        }
    }
    let figures: Vec<String> = rows
        .iter()
        .filter(|r| !r.figures.is_empty())
        .map(|r| {
            let list: Vec<String> = r
                .figures
                .iter()
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect();
            format!(
                "- {} / {} (concurrency {}): {}",
                r.backend,
                r.case,
                r.concurrency.unwrap_or(0),
                list.join(", ")
            )
        })
        .collect();
    if !figures.is_empty() {
        out.push_str("\nFigures:\n");
        out.push_str(&figures.join("\n"));
        out.push('\n');
    }
    let notes: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.note
                .as_ref()
                .map(|n| format!("- {} / {}: {n}", r.backend, r.case))
        })
        .collect();
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}
