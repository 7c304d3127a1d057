//! Where the time goes: CPU of the server's processes and of this client, and Redis's own
//! per-command accounting, sampled around every measured batch.
//!
//! CPU time comes from `/proc/<pid>/task/*/schedstat` (nanoseconds on CPU, every thread), so a
//! batch of a few hundred operations is measured exactly rather than in 10 ms ticks. A server
//! is counted with all its descendants (PostgreSQL's backends, a wrapper's child).

use std::collections::BTreeMap;
use std::path::Path;

use fence_redis::redis::aio::ConnectionManager;

/// Nanoseconds process `pid` has run, over all its threads; `None` when it is gone.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total)
}

/// The server whose CPU a case charges its operations with.
#[derive(Clone, Debug)]
pub(crate) struct Server {
    pid: u32,
}

impl Server {
    /// The process whose pid `scripts/services` wrote to `file`, relative to its data folder
    /// (`FENCE_SERVICES_DIR`, by default `.services` under the repository root, where
    /// `scripts/bench` runs); `None` when there is none.
    pub(crate) fn from_pid_file(file: &str) -> Option<Self> {
        let dir = std::env::var("FENCE_SERVICES_DIR").unwrap_or_else(|_| ".services".into());
        let text = std::fs::read_to_string(Path::new(&dir).join(file)).ok()?;
        let pid = text.lines().next()?.trim().parse().ok()?;
        process_cpu_ns(pid).map(|_| Server { pid })
    }

    fn cpu_ns(&self) -> u64 {
        fence_testkit::process::descendants(self.pid)
            .into_iter()
            .filter_map(process_cpu_ns)
            .sum()
    }
}

/// Per-command calls and server microseconds (`INFO commandstats`).
pub(crate) type CommandStats = BTreeMap<String, (u64, u64)>;

/// What is sampled around each batch.
#[derive(Clone, Debug, Default)]
pub(crate) struct Probe {
    pub(crate) server: Option<Server>,
    /// A connection of its own to the Redis server under test, for `INFO commandstats`.
    pub(crate) redis: Option<ConnectionManager>,
}

/// One sample: cumulative counters at an instant.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    server_ns: Option<u64>,
    client_ns: u64,
    commands: CommandStats,
}

/// What a batch cost: the difference of two samples.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cost {
    pub(crate) server_ns: Option<u64>,
    pub(crate) client_ns: u64,
    pub(crate) commands: CommandStats,
}

impl Cost {
    pub(crate) fn add(&mut self, other: &Cost) {
        self.server_ns = match (self.server_ns, other.server_ns) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) => b,
            (a, None) => a,
        };
        self.client_ns += other.client_ns;
        for (name, (calls, usec)) in &other.commands {
            let entry = self.commands.entry(name.clone()).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
    }
}

impl Probe {
    /// A probe of the Redis server at `url`: its CPU (from its pid file when `scripts/services`
    /// started it) and its command statistics.
    pub(crate) async fn redis(url: &str, pid_file: &str) -> Self {
        let redis = match fence_redis::redis::Client::open(url) {
            Ok(client) => ConnectionManager::new(client).await.ok(),
            Err(_) => None,
        };
        Probe {
            server: Server::from_pid_file(pid_file),
            redis,
        }
    }

    /// A probe of a server's CPU only.
    pub(crate) fn server(pid_file: &str) -> Self {
        Probe {
            server: Server::from_pid_file(pid_file),
            redis: None,
        }
    }

    pub(crate) async fn sample(&self) -> Sample {
        let commands = match &self.redis {
            Some(connection) => commandstats(connection.clone()).await,
            None => CommandStats::new(),
        };
        Sample {
            server_ns: self.server.as_ref().map(Server::cpu_ns),
            client_ns: process_cpu_ns(std::process::id()).unwrap_or(0),
            commands,
        }
    }
}

impl Sample {
    /// The cost between `self` (before) and `after`; the probe's own `INFO` is left out.
    pub(crate) fn until(&self, after: &Sample) -> Cost {
        let commands = after
            .commands
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .filter_map(|(name, &(calls, usec))| {
                let (calls0, usec0) = self.commands.get(name).copied().unwrap_or_default();
                (calls > calls0)
                    .then(|| (name.clone(), (calls - calls0, usec.saturating_sub(usec0))))
            })
            .collect();
        Cost {
            server_ns: self
                .server_ns
                .zip(after.server_ns)
                .map(|(a, b)| b.saturating_sub(a)),
            client_ns: after.client_ns.saturating_sub(self.client_ns),
            commands,
        }
    }
}

/// `INFO commandstats` as command → (calls, usec); empty when it cannot be read.
async fn commandstats(mut connection: ConnectionManager) -> CommandStats {
    let info: String = match fence_redis::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
    {
        Ok(info) => info,
        Err(_) => return CommandStats::new(),
    };
    parse_commandstats(&info)
}

/// Parses lines like `cmdstat_set:calls=12,usec=40,usec_per_call=3.33,…`.
fn parse_commandstats(info: &str) -> CommandStats {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            Some((name.to_owned(), (field("calls")?, field("usec")?)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_lines_are_parsed_and_the_probe_is_left_out() {
        let before = Sample {
            commands: parse_commandstats(
                "# Commandstats\r\ncmdstat_set:calls=10,usec=30,usec_per_call=3.00,rejected_calls=0\r\ncmdstat_info:calls=1,usec=9\r\n",
            ),
            ..Sample::default()
        };
        let after = Sample {
            commands: parse_commandstats(
                "cmdstat_set:calls=14,usec=42,usec_per_call=3.00\r\ncmdstat_evalsha:calls=2,usec=20\r\ncmdstat_info:calls=2,usec=19\r\n",
            ),
            ..Sample::default()
        };
        let cost = before.until(&after);
        assert_eq!(cost.commands.get("set"), Some(&(4, 12)));
        assert_eq!(cost.commands.get("evalsha"), Some(&(2, 20)));
        assert!(!cost.commands.contains_key("info"));
    }

    #[test]
    fn this_process_has_run_and_its_children_are_found() -> std::io::Result<()> {
        let pid = std::process::id();
        assert!(process_cpu_ns(pid).is_some_and(|ns| ns > 0));
        let mut child = std::process::Command::new("sleep").arg("5").spawn()?;
        let found = fence_testkit::process::descendants(pid).contains(&child.id());
        child.kill()?;
        child.wait()?;
        assert!(
            found,
            "the child {} is not among the descendants",
            child.id()
        );
        Ok(())
    }
}
