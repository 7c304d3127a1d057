//! `fence-bench`: the price of fencing, per backend, fenced and unfenced side by side in one run.
//!
//! `scripts/bench` starts the services and runs this in release mode; `--only memory,redis`
//! limits the backends. Writes `target/fence-bench/report.json` and prints a table.

mod kafka;
mod measure;
mod memory;
mod outbox;
mod postgres;
mod redis;
mod report;
mod s3;
mod state;

use std::process::ExitCode;

use report::Row;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let only: Option<Vec<String>> = std::env::args()
        .skip_while(|a| a != "--only")
        .nth(1)
        .map(|list| list.split(',').map(str::to_owned).collect());
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|w| w == name));
    // `--state N`: the bytes each backend keeps per domain, after N domains' workloads.
    if let Some(domains) = std::env::args().skip_while(|a| a != "--state").nth(1) {
        let Ok(domains) = domains.parse::<usize>() else {
            eprintln!("--state takes a number of domains");
            return ExitCode::FAILURE;
        };
        eprintln!("measuring state per domain over {domains} domains…");
        let rows = state::run(domains).await;
        println!("{}", state::table(&rows));
        return ExitCode::SUCCESS;
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
    if wanted("s3") {
        eprintln!("benchmarking s3…");
        rows.extend(s3::run().await);
    }
    if wanted("kafka") {
        eprintln!("benchmarking kafka…");
        rows.extend(kafka::run().await);
    }
    if wanted("postgres") {
        eprintln!("benchmarking postgres…");
        rows.extend(postgres::run().await);
    }
    if wanted("outbox") {
        eprintln!("benchmarking outbox…");
        rows.extend(outbox::run().await);
    }
    let json = report::json(&rows);
    let directory = std::path::Path::new("target/fence-bench");
    if let Err(error) = std::fs::create_dir_all(directory)
        .and_then(|()| std::fs::write(directory.join("report.json"), &json))
    {
        eprintln!("could not write target/fence-bench/report.json: {error}");
        return ExitCode::FAILURE;
    }
    println!("{}", report::table(&rows));
    println!("report: target/fence-bench/report.json");
    ExitCode::SUCCESS
}
