//! `fence`: look at and act on fenced state where it lives, for operators.
//!
//! Configured from the same environment variables as the library builders (every one is also a
//! flag: see `fence --help`). Human output by default, `--json` for scripts. The exit code says
//! what happened: see [`report::Exit`].

mod cleanup;
mod decode;
mod inspect;
mod mutate;
mod outbox;
mod permissions;
mod qualify;
mod report;
mod target;
mod targets;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use report::{Exit, Report};
use targets::Targets;

/// Look at and act on fenced state where it lives.
///
/// Exit codes: 0 done; 1 failed otherwise; 2 bad usage or input; 3 the fence refused the token
/// (stale, too far, unissued); 4 not found; 5 corrupt or foreign state; 6 the resource is
/// unavailable (a retry may help); 7 ambiguous (sent, outcome unknown); 8 `qualify`: not
/// qualified; 9 `qualify`: inconclusive.
#[derive(Debug, Parser)]
#[command(name = "fence", version)]
struct Cli {
    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    targets: Targets,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a domain's mark, entry, remembered operation ids and lease holder.
    Inspect {
        /// Where the domain lives.
        backend: Backend,
        /// The domain.
        domain: String,
    },
    /// Raise a domain's mark to TOKEN (refused when the mark is already above it).
    Claim {
        /// Where the domain lives.
        backend: Backend,
        /// The domain.
        domain: String,
        /// The token (canonical decimal).
        token: String,
    },
    /// Take the domain's next token from the resource's own issuer (Redis, PostgreSQL, MySQL,
    /// etcd, DynamoDB):
    /// above every token its leases and issuer gave the domain. With `claim` and `delete`, what
    /// fences every holder out before a domain is retired (LIFECYCLE.md).
    Issue {
        /// Where the domain lives.
        backend: Backend,
        /// The domain.
        domain: String,
    },
    /// Delete the domain's value under TOKEN: a tombstone, the mark kept (refused, exit 3, when
    /// the mark is above TOKEN). Stores only: a Kafka log has no delete.
    Delete {
        /// Where the domain lives.
        backend: Backend,
        /// The domain.
        domain: String,
        /// The token (canonical decimal).
        token: String,
    },
    /// Bring data another tool wrote under fencing, with TOKEN as the domain's mark.
    ///
    /// S3: the object at the domain's key keeps its bytes and metadata and gains the envelope.
    /// Redis: `--key` names the key to adopt; a string becomes the domain's value, or any key
    /// becomes the user key `--user-key` for fenced scripts.
    Adopt {
        /// Where the data lives.
        backend: AdoptBackend,
        /// The domain.
        domain: String,
        /// The token (canonical decimal).
        token: String,
        /// Redis: the key to adopt.
        #[arg(long)]
        key: Option<String>,
        /// Redis: adopt `--key` as this user key of the domain instead of as its value.
        #[arg(long, requires = "key")]
        user_key: Option<String>,
    },
    /// Remove a domain that will never be used again: its mark, value, issuer counter,
    /// remembered operation ids and data objects or user keys (re-base records are kept).
    ///
    /// Any token writes to a retired domain again: run it only after fencing everyone out and
    /// waiting until every holder ended (LIFECYCLE.md), and never reuse the name. Refused while
    /// a lease on the domain is live (Redis, PostgreSQL, MySQL, etcd; DynamoDB, which has no
    /// clock, while one is recorded at all: release it first; S3 and object stores keep no
    /// lease to check). Kafka has no retirement (see LIFECYCLE.md).
    Retire {
        /// Where the domain lives.
        backend: RetireBackend,
        /// The domain.
        domain: String,
        /// Confirm that no process holds a token for the domain and its name is never reused.
        #[arg(long)]
        yes: bool,
    },
    /// A domain's outbox: its entries and the relay's lag; re-driving or discarding a dead letter.
    Outbox {
        #[command(subcommand)]
        action: OutboxAction,
    },
    /// Check that the configured credentials have every permission the adapter needs (IAM
    /// actions of S3 and DynamoDB, Redis ACL commands, Kafka ACLs, PostgreSQL privileges, etcd
    /// key ranges), each
    /// used for real on a probe (PostgreSQL: read from its privilege functions); the missing
    /// ones are named. Permissions only operators need (retiring a domain, re-bases) are
    /// marked `[operators]`: a worker's credentials pass without them. Exit 0: every permission
    /// the role needs granted; 1: some denied or unknown.
    Permissions {
        /// The backend.
        backend: Backend,
        /// Check an operator's credentials: the operators' permissions count too.
        #[arg(long)]
        operator: bool,
    },
    /// Prove Fence on your own endpoint: a seeded torture run (workers losing their leases and
    /// writing on, optionally cut connections) confined to names of its own under the
    /// configured prefix, schema or topic, checked property by property, then removed. An
    /// endpoint that ignores conditional writes or accepts a stale token is refused without a
    /// run. Exit 0: qualified; 8: refused or a property violated; 9: inconclusive (nothing
    /// violated, nothing proven).
    Qualify {
        /// The endpoint's kind.
        backend: Backend,
        #[command(flatten)]
        args: qualify::QualifyArgs,
    },
    /// Decode a record Fence wrote at a resource and print it (`--json` for JSON).
    Decode {
        /// Which record.
        format: Format,
        /// Read it from this file instead of standard input.
        #[arg(long, conflicts_with = "object")]
        file: Option<PathBuf>,
        /// Read the object with this key from the configured S3 bucket.
        #[arg(long, conflicts_with_all = ["key", "store_object"])]
        object: Option<String>,
        /// Read the object with this key through the configured object_store URL
        /// (`FENCE_OBJECT_STORE_URL`: Azure Blob, Google Cloud Storage, S3).
        #[arg(long, conflicts_with_all = ["key", "file"])]
        store_object: Option<String>,
        /// redis-state: read this state key (`<prefix>:{<domain>}:state`) from the configured
        /// Redis.
        #[arg(long, conflicts_with = "file")]
        key: Option<String>,
    },
    /// Print the shell completion script for SHELL (e.g. `fence completions bash >
    /// /etc/bash_completion.d/fence`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff; e.g. `fence manpage > /usr/local/share/man/man1/fence.1`).
    Manpage,
}

#[derive(Debug, Subcommand)]
enum OutboxAction {
    /// List the entries still kept (pending, delivered within retention, dead letters) and how
    /// long the oldest pending one has waited (the relay's lag on the domain).
    List {
        /// Where the outbox lives.
        backend: OutboxBackend,
        /// The domain.
        domain: String,
    },
    /// Deliver dead letter SEQ again: it becomes a new pending entry after the last one, with
    /// the same idempotency key (exit 4 when it is not a dead letter).
    Redrive {
        /// Where the outbox lives.
        backend: OutboxBackend,
        /// The domain.
        domain: String,
        /// The entry's sequence number.
        seq: u64,
    },
    /// Remove dead letter SEQ once an operator has dealt with it (exit 4 when it is not one).
    Discard {
        /// Where the outbox lives.
        backend: OutboxBackend,
        /// The domain.
        domain: String,
        /// The entry's sequence number.
        seq: u64,
    },
}

/// A backend with an outbox the tool can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OutboxBackend {
    /// fence-outbox-redis.
    Redis,
    /// fence-outbox-postgres.
    Postgres,
    /// fence-outbox-mysql.
    Mysql,
    /// fence-outbox-dynamodb (its table: `FENCE_DYNAMODB_OUTBOX_TABLE`).
    Dynamodb,
}

/// A backend with fenced domains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// Redis, Redis Cluster or Redis behind Sentinel (`FENCE_REDIS_URL`, `FENCE_REDIS_CLUSTER`
    /// or `FENCE_REDIS_SENTINELS` with `FENCE_REDIS_SENTINEL_SERVICE`).
    Redis,
    /// S3 or an S3-compatible server (`FENCE_S3_*`).
    S3,
    /// PostgreSQL (`FENCE_POSTGRES_URL`).
    Postgres,
    /// MySQL or MariaDB (`FENCE_MYSQL_URL`).
    Mysql,
    /// etcd (`FENCE_ETCD_ENDPOINTS`).
    Etcd,
    /// DynamoDB (`FENCE_DYNAMODB_TABLE`, `FENCE_DYNAMODB_NAMESPACE`): the domain's item.
    Dynamodb,
    /// Any object store object_store speaks, by URL (`FENCE_OBJECT_STORE_URL`: `az://container`,
    /// `gs://bucket`, `s3://bucket`), with object_store's own settings (`AZURE_*`, `GOOGLE_*`,
    /// `AWS_*`).
    ObjectStore,
    /// Kafka (`FENCE_KAFKA_BOOTSTRAP`, `FENCE_KAFKA_TOPIC`): the domain's fence-ledger record.
    /// A claim opens the domain's transactional producer, which aborts the owner's open
    /// transaction: claim only to fence a holder out.
    Kafka,
}

/// A backend whose domains can be retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RetireBackend {
    /// Redis, Redis Cluster or Redis behind Sentinel.
    Redis,
    /// S3 or an S3-compatible server.
    S3,
    /// Any object store, by URL (`FENCE_OBJECT_STORE_URL`).
    ObjectStore,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
    /// etcd.
    Etcd,
    /// DynamoDB.
    Dynamodb,
}

impl From<RetireBackend> for Backend {
    fn from(backend: RetireBackend) -> Self {
        match backend {
            RetireBackend::Redis => Backend::Redis,
            RetireBackend::S3 => Backend::S3,
            RetireBackend::ObjectStore => Backend::ObjectStore,
            RetireBackend::Postgres => Backend::Postgres,
            RetireBackend::Mysql => Backend::Mysql,
            RetireBackend::Etcd => Backend::Etcd,
            RetireBackend::Dynamodb => Backend::Dynamodb,
        }
    }
}

/// A backend that can adopt data another tool wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AdoptBackend {
    /// Redis: `--key` names the key.
    Redis,
    /// S3: the object at the domain's key.
    S3,
}

/// A record format FORMATS.md specifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// A fenced object's `FENCE-S3/1` envelope, as fence-s3 and fence-object-store write it
    /// (and its payload's size).
    S3Envelope,
    /// A `FENCE-MANIFEST/1` payload: the plain objects a fenced pointer names.
    Manifest,
    /// A `FENCE-KAFKA/1` fence-ledger record's value.
    KafkaLedger,
    /// A Kafka record's headers, one `name=value` per line (the fence headers are decoded).
    KafkaHeaders,
    /// A Redis outbox entry's packed record (`<recorded ms>|<token>` LF, then the fields).
    RedisOutboxEntry,
    /// A domain's Redis state hash: `--key`, or one `field value` per line (FORMATS.md §3.2).
    RedisState,
    /// A Kafka outbox relay's `FENCE-OUTBOX-PROGRESS/1` record value.
    KafkaOutboxProgress,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Generated from the argument definitions: nothing to connect to.
    match &cli.command {
        Command::Completions { shell } => {
            // Generated in memory: clap_complete panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "fence", &mut script);
            return match std::io::Write::write_all(&mut std::io::stdout(), &script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("fence: cannot write the completion script: {error}");
                    ExitCode::from(Exit::Failed as u8)
                }
            };
        }
        Command::Manpage => {
            return match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("fence: cannot write the manual page: {error}");
                    ExitCode::from(Exit::Failed as u8)
                }
            };
        }
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fence: cannot start the async runtime: {error}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    let report = runtime.block_on(run(&cli));
    report.print(cli.json)
}

async fn run(cli: &Cli) -> Report {
    let targets = &cli.targets;
    match &cli.command {
        Command::Inspect { backend, domain } => inspect::run(targets, *backend, domain).await,
        Command::Claim {
            backend,
            domain,
            token,
        } => mutate::claim(targets, *backend, domain, token).await,
        Command::Adopt {
            backend,
            domain,
            token,
            key,
            user_key,
        } => {
            let redis_key = key.as_deref().zip(Some(user_key.as_deref()));
            mutate::adopt(targets, *backend, domain, token, redis_key).await
        }
        Command::Retire {
            backend,
            domain,
            yes,
        } => mutate::retire(targets, *backend, domain, *yes).await,
        Command::Issue { backend, domain } => mutate::issue(targets, *backend, domain).await,
        Command::Delete {
            backend,
            domain,
            token,
        } => mutate::delete(targets, *backend, domain, token).await,
        Command::Outbox { action } => match action {
            OutboxAction::List { backend, domain } => outbox::list(targets, *backend, domain).await,
            OutboxAction::Redrive {
                backend,
                domain,
                seq,
            } => outbox::redrive(targets, *backend, domain, *seq).await,
            OutboxAction::Discard {
                backend,
                domain,
                seq,
            } => outbox::discard(targets, *backend, domain, *seq).await,
        },
        Command::Permissions { backend, operator } => {
            permissions::run(targets, *backend, *operator).await
        }
        Command::Qualify { backend, args } => qualify::run(targets, *backend, args).await,
        // Handled in main, before the runtime starts.
        Command::Completions { .. } | Command::Manpage => Report::usage("not a runtime command"),
        Command::Decode {
            format,
            file,
            object,
            store_object,
            key,
        } => {
            let object = match (object, store_object) {
                (Some(key), _) => Some(decode::Object::S3(key)),
                (_, Some(key)) => Some(decode::Object::ObjectStore(key)),
                (None, None) => None,
            };
            let source = decode::Source::new(file.as_deref(), object, key.as_deref());
            decode::run(targets, *format, source).await
        }
    }
}
