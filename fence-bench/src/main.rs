//! `fence-bench`: the price of fencing, per backend, fenced and unfenced side by side in one run.
//!
//! `scripts/bench` starts the services and runs this in release mode from the repository root:
//! - `--only memory,redis` limits the backends;
//! - `--state N` measures the state kept per domain after N domains' workloads instead;
//! - `--growth [N]` draws the growth curves instead (domains up to N, by default 100,000):
//!   `benchmarks/growth.json` and `benchmarks/growth.svg`;
//! - `--chart REPORT SVG` only redraws a chart from a `report.json`.
//!
//! A run writes `target/fence-bench/report.json`, merges its rows into `benchmarks/report.json`
//! (the latest rows of every backend), draws `benchmarks/ratios.svg` from it, appends the ratios
//! to `benchmarks/history.jsonl` (labelled with `FENCE_BENCH_RUN`) and rewrites
//! `benchmarks/HISTORY.md`; then prints the tables.

mod chart;
mod dynamodb;
mod etcd;
mod fenced;
mod growth;
mod growth_chart;
mod growth_targets;
mod history;
mod kafka;
mod measure;
mod memory;
mod mysql;
mod object_store;
mod outbox;
mod postgres;
mod probe;
mod redis;
mod report;
mod s3;
mod sql;
mod state;

use std::path::Path;
use std::process::ExitCode;

use report::Row;

/// The backends `--only` may name.
const BACKENDS: [&str; 10] = [
    "memory",
    "redis",
    "outbox",
    "s3",
    "object_store",
    "postgres",
    "mysql",
    "etcd",
    "dynamodb",
    "kafka",
];

/// Where the committed figures live (relative to the repository root).
const BENCHMARKS: &str = "benchmarks";

fn arg_after(flag: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != flag).nth(1)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    if let Some(report) = arg_after("--chart") {
        let Some(svg) = std::env::args().skip_while(|a| a != "--chart").nth(2) else {
            eprintln!("--chart takes a report.json and the SVG to write");
            return ExitCode::FAILURE;
        };
        return match chart::render(Path::new(&report), Path::new(&svg)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        };
    }
    let only: Option<Vec<String>> =
        arg_after("--only").map(|list| list.split(',').map(str::to_owned).collect());
    if let Some(unknown) = only
        .iter()
        .flatten()
        .find(|name| !BACKENDS.contains(&name.as_str()))
    {
        eprintln!(
            "--only: unknown backend `{unknown}` (known: {})",
            BACKENDS.join(", ")
        );
        return ExitCode::FAILURE;
    }
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|w| w == name));
    if let Some(domains) = arg_after("--state") {
        let Ok(domains) = domains.parse::<usize>() else {
            eprintln!("--state takes a number of domains");
            return ExitCode::FAILURE;
        };
        eprintln!("measuring state per domain over {domains} domains…");
        let rows = state::run(domains, wanted).await;
        println!("{}", state::table(&rows));
        return ExitCode::SUCCESS;
    }
    if std::env::args().any(|a| a == "--growth") {
        let max = match arg_after("--growth").filter(|a| !a.starts_with("--")) {
            None => 100_000,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    eprintln!("--growth takes a number of domains (at least 1)");
                    return ExitCode::FAILURE;
                }
            },
        };
        let points = growth::run(max, wanted).await;
        println!("{}", growth::table(&points));
        return match growth::publish(&points, Path::new(BENCHMARKS)) {
            Ok(()) => {
                println!("growth: {BENCHMARKS}/growth.json, {BENCHMARKS}/growth.svg");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        };
    }
    let mut rows: Vec<Row> = Vec::new();
    if wanted("memory") {
        eprintln!("benchmarking memory…");
        rows.extend(memory::run().await);
    }
    if wanted("redis") {
        eprintln!("benchmarking redis…");
        rows.extend(redis::run().await);
    }
    if wanted("outbox") {
        eprintln!("benchmarking outbox…");
        rows.extend(outbox::run().await);
    }
    if wanted("s3") {
        eprintln!("benchmarking s3…");
        rows.extend(s3::run().await);
    }
    if wanted("object_store") {
        eprintln!("benchmarking object_store…");
        rows.extend(object_store::run().await);
    }
    if wanted("postgres") {
        eprintln!("benchmarking postgres…");
        rows.extend(postgres::run().await);
    }
    if wanted("mysql") {
        eprintln!("benchmarking mysql…");
        rows.extend(mysql::run().await);
    }
    if wanted("etcd") {
        eprintln!("benchmarking etcd…");
        rows.extend(etcd::run().await);
    }
    if wanted("dynamodb") {
        eprintln!("benchmarking dynamodb…");
        rows.extend(dynamodb::run().await);
    }
    if wanted("kafka") {
        eprintln!("benchmarking kafka…");
        rows.extend(kafka::run().await);
    }
    match publish(&rows) {
        Ok(()) => {
            println!("{}", report::table(&rows));
            println!("report: target/fence-bench/report.json; chart: {BENCHMARKS}/ratios.svg; history: {BENCHMARKS}/HISTORY.md");
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("{}", report::table(&rows));
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Writes this run's report, merges it into the latest figures, redraws the chart and extends
/// the history.
fn publish(rows: &[Row]) -> Result<(), String> {
    let json = |rows: &[Row]| serde_json::to_string_pretty(rows).map_err(|e| e.to_string());
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).map_err(|e| format!("could not write {}: {e}", path.display()))
    };
    let target = Path::new("target/fence-bench");
    std::fs::create_dir_all(target)
        .map_err(|e| format!("could not create {}: {e}", target.display()))?;
    write(&target.join("report.json"), json(rows)?)?;

    let dir = Path::new(BENCHMARKS);
    std::fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    let latest = dir.join("report.json");
    let mut merged: Vec<Row> = match std::fs::read_to_string(&latest) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a fence-bench report: {e}", latest.display()))?,
        Err(_) => Vec::new(),
    };
    merged.retain(|old| !rows.iter().any(|new| new.backend == old.backend));
    merged.extend(rows.iter().cloned());
    write(&latest, json(&merged)?)?;
    chart::render(&latest, &dir.join("ratios.svg"))?;
    let run = std::env::var("FENCE_BENCH_RUN").unwrap_or_else(|_| "unlabelled run".to_owned());
    history::append(dir, &run, rows)
}
