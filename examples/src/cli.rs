//! `--help` for every example: what it shows, its options, and the variables it reads.

/// The variables the examples read, with the defaults they fall back to.
pub const ENVIRONMENT: &str = "\
Servers (each defaults to the project's own, which `scripts/services up` starts;
`eval \"$(scripts/services env)\"` sets them all):
  FENCE_REDIS_URL        Redis (default redis://127.0.0.1:6390)
  FENCE_REDIS_CLUSTER    Redis Cluster nodes, comma-separated (instead of FENCE_REDIS_URL)
  FENCE_S3_ENDPOINT      S3-compatible endpoint (default http://127.0.0.1:8333, SeaweedFS)
  FENCE_S3_BUCKET, FENCE_S3_ACCESS_KEY, FENCE_S3_SECRET_KEY, FENCE_S3_REGION
                         bucket (default fence-test), credentials (default the local test
                         server's), region (default us-east-1)
  FENCE_KAFKA_BOOTSTRAP  Kafka bootstrap servers (default 127.0.0.1:19092, Apache Kafka)
  FENCE_POSTGRES_URL     PostgreSQL (default postgres://fence@127.0.0.1:5440/postgres)
  FENCE_MYSQL_URL        MySQL or MariaDB (default mysql://fence:fence@127.0.0.1:3340/fence, MariaDB)
  FENCE_AZURITE_URL      Azurite's account URL for table_commit --backend azure
                         (default http://127.0.0.1:10100/devstoreaccount1)";

/// True (after printing `usage` and [`ENVIRONMENT`]) when the arguments ask for help
/// (`-h` or `--help`): the example then exits successfully without running.
pub fn help_requested(usage: &str) -> bool {
    let asked = std::env::args()
        .skip(1)
        .any(|arg| arg == "-h" || arg == "--help");
    if asked {
        println!("{usage}\n\n{ENVIRONMENT}");
    }
    asked
}

/// The arguments after the program name, less `-h`/`--help`.
fn arguments() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|arg| arg != "-h" && arg != "--help")
        .collect()
}

/// Refuses any argument: for the examples that take none.
pub fn no_arguments() -> Result<(), ExampleError> {
    match arguments().first() {
        None => Ok(()),
        Some(arg) => {
            Err(format!("unknown argument `{arg}` (this example takes none; --help)").into())
        }
    }
}

/// The name given by `--backend NAME` (or `--backend=NAME`; the last one wins) in `args`;
/// any other argument is refused.
pub(crate) fn backend_name(
    args: impl IntoIterator<Item = String>,
) -> Result<Option<String>, String> {
    let mut args = args.into_iter();
    let mut chosen = None;
    while let Some(arg) = args.next() {
        chosen = Some(match arg.strip_prefix("--backend=") {
            Some(name) => name.to_owned(),
            None if arg == "--backend" => args
                .next()
                .ok_or_else(|| "--backend needs a name (--help)".to_owned())?,
            None => return Err(format!("unknown argument `{arg}` (--help)")),
        });
    }
    Ok(chosen)
}

/// The backend named by `--backend NAME` on the command line, else `default`; any other
/// argument is refused.
pub fn backend_arg(default: &str) -> Result<String, ExampleError> {
    Ok(backend_name(arguments())?.unwrap_or_else(|| default.to_owned()))
}

/// An example's error: shown with `Display`, never as a `Debug` dump.
pub type ExampleError = Box<dyn std::error::Error + Send + Sync>;

/// Runs an example's `story` unless `--help` was asked: exit 0 when it returns `true` (the
/// stale worker was refused, as the story expects), 1 when `false` or on an error, printed
/// with `Display` (a server that could not be reached names its address and the variable to
/// set).
pub async fn run_example(
    name: &str,
    usage: &str,
    story: impl std::future::Future<Output = Result<bool, ExampleError>>,
) -> std::process::ExitCode {
    if help_requested(usage) {
        return std::process::ExitCode::SUCCESS;
    }
    match story.await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{name}: the stale worker was NOT refused: fencing failed");
            std::process::ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("{name} failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
