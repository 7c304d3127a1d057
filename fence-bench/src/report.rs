//! One row per case: JSON for machines, a table for people.

use std::fmt::Write as _;

use crate::measure::Side;

/// A compared case.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) backend: &'static str,
    pub(crate) case: String,
    pub(crate) fenced_p50_us: Option<f64>,
    pub(crate) fenced_p99_us: Option<f64>,
    pub(crate) unfenced_p50_us: Option<f64>,
    pub(crate) unfenced_p99_us: Option<f64>,
    pub(crate) fenced_ops_s: Option<f64>,
    pub(crate) unfenced_ops_s: Option<f64>,
    pub(crate) requests_per_write: Option<f64>,
    pub(crate) note: Option<String>,
}

impl Row {
    pub(crate) fn new(
        backend: &'static str,
        case: impl Into<String>,
        fenced: &Side,
        unfenced: &Side,
    ) -> Self {
        let failures: Vec<&String> = fenced.failures.iter().chain(&unfenced.failures).collect();
        Row {
            backend,
            case: case.into(),
            fenced_p50_us: fenced.p(0.5),
            fenced_p99_us: fenced.p(0.99),
            unfenced_p50_us: unfenced.p(0.5),
            unfenced_p99_us: unfenced.p(0.99),
            fenced_ops_s: fenced.ops_per_second(),
            unfenced_ops_s: unfenced.ops_per_second(),
            requests_per_write: None,
            note: (!failures.is_empty()).then(|| {
                format!(
                    "{} failed operations, first: {}",
                    failures.len(),
                    failures[0]
                )
            }),
        }
    }

    /// A case that could not run.
    pub(crate) fn skipped(
        backend: &'static str,
        case: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Row {
            backend,
            case: case.into(),
            fenced_p50_us: None,
            fenced_p99_us: None,
            unfenced_p50_us: None,
            unfenced_p99_us: None,
            fenced_ops_s: None,
            unfenced_ops_s: None,
            requests_per_write: None,
            note: Some(why.into()),
        }
    }

    pub(crate) fn latency_ratio(&self) -> Option<f64> {
        Some(self.fenced_p50_us? / self.unfenced_p50_us?)
    }

    pub(crate) fn throughput_ratio(&self) -> Option<f64> {
        Some(self.fenced_ops_s? / self.unfenced_ops_s?)
    }
}

fn number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => "null".to_owned(),
    }
}

fn string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The report as a JSON array of objects.
pub(crate) fn json(rows: &[Row]) -> String {
    let objects: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "  {{\"backend\": {}, \"case\": {}, \"fenced_p50_us\": {}, \"unfenced_p50_us\": {}, \"latency_ratio\": {}, \"fenced_ops_s\": {}, \"unfenced_ops_s\": {}, \"throughput_ratio\": {}, \"requests_per_write\": {}, \"fenced_p99_us\": {}, \"unfenced_p99_us\": {}, \"note\": {}}}",
                string(r.backend),
                string(&r.case),
                number(r.fenced_p50_us),
                number(r.unfenced_p50_us),
                number(r.latency_ratio()),
                number(r.fenced_ops_s),
                number(r.unfenced_ops_s),
                number(r.throughput_ratio()),
                number(r.requests_per_write),
                number(r.fenced_p99_us),
                number(r.unfenced_p99_us),
                r.note.as_deref().map_or_else(|| "null".to_owned(), string),
            )
        })
        .collect();
    format!("[\n{}\n]\n", objects.join(",\n"))
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// The report as a Markdown table.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| backend | case | fenced p50 µs | unfenced p50 µs | latency ratio | fenced p99 µs | unfenced p99 µs | fenced ops/s | unfenced ops/s | throughput ratio | requests/write |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            r.case,
            cell(r.fenced_p50_us, 1),
            cell(r.unfenced_p50_us, 1),
            cell(r.latency_ratio(), 2),
            cell(r.fenced_p99_us, 1),
            cell(r.unfenced_p99_us, 1),
            cell(r.fenced_ops_s, 0),
            cell(r.unfenced_ops_s, 0),
            cell(r.throughput_ratio(), 2),
            cell(r.requests_per_write, 2),
        );
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
