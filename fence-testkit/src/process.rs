//! One server process a test owns: its data dir, its child process, the port it must be the
//! one to listen on, and the kill / stop / pause / restart every managed server offers.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many times a server is tried on fresh ports before the test gives up.
const TRIES: usize = 5;

/// A server process owned by a test, killed and its data dir removed when dropped.
#[derive(Debug)]
pub struct ManagedProcess {
    what: &'static str,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
    stop_signal: &'static str,
}

/// Waiting for a just-spawned server: see [`ManagedProcess::ready`].
#[derive(Debug)]
pub struct Readiness {
    port: u16,
    deadline: Instant,
    foreign_since: Option<Instant>,
}

impl ManagedProcess {
    /// Starts a server `what` (`redis-server`, `weed mini`, …) for test `name`: up to five
    /// tries, each with a fresh, empty data dir under [`crate::data_root`]`(kind)` and fresh
    /// ports chosen by `attempt`, which spawns it and returns the server once it answers on a
    /// port it owns (or `None` when the port turned out to be another process's).
    pub fn start<S>(
        what: &'static str,
        kind: &str,
        name: &str,
        mut attempt: impl FnMut(ManagedProcess) -> Option<S>,
    ) -> S {
        let dir = crate::data_root(kind).join(format!("{name}-{}", crate::unique_suffix()));
        for _ in 0..TRIES {
            if let Some(server) = attempt(ManagedProcess::fresh(what, &dir)) {
                return server;
            }
        }
        panic!("{what} could not get a port of its own in {TRIES} tries");
    }

    /// The async twin of [`ManagedProcess::start`], for servers whose readiness is checked
    /// with an async client.
    pub async fn start_async<S, F>(
        what: &'static str,
        kind: &str,
        name: &str,
        mut attempt: impl FnMut(ManagedProcess) -> F,
    ) -> S
    where
        F: std::future::Future<Output = Option<S>>,
    {
        let dir = crate::data_root(kind).join(format!("{name}-{}", crate::unique_suffix()));
        for _ in 0..TRIES {
            if let Some(server) = attempt(ManagedProcess::fresh(what, &dir)).await {
                return server;
            }
        }
        panic!("{what} could not get ports of its own in {TRIES} tries");
    }

    fn fresh(what: &'static str, dir: &Path) -> ManagedProcess {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("test data dir");
        ManagedProcess {
            what,
            dir: dir.to_path_buf(),
            child: Mutex::new(None),
            stop_signal: "TERM",
        }
    }

    /// Stops the server with `signal` instead of SIGTERM (PostgreSQL: `INT`, a fast shutdown
    /// that does not wait for clients to leave).
    pub fn with_stop_signal(mut self, signal: &'static str) -> Self {
        self.stop_signal = signal;
        self
    }

    /// The server's data dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Spawns `command` as this server's process (replacing none: kill it first) and starts
    /// waiting, up to `timeout`, for it to answer on `port`.
    pub fn spawn(&self, command: &mut Command, port: u16, timeout: Duration) -> Readiness {
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", self.what));
        *self.lock() = Some(child);
        Readiness {
            port,
            deadline: Instant::now() + timeout,
            foreign_since: None,
        }
    }

    /// One step of waiting, where `answering` says whether something answers on the port
    /// now: `Some(true)` once our child owns the listening socket, `Some(false)` when the port
    /// is not ours after all (our child exited, or another process has answered on it for a
    /// second; our child is then killed), `None` to keep waiting. Panics past the deadline.
    pub fn ready(&self, readiness: &mut Readiness, answering: bool) -> Option<bool> {
        let mut guard = self.lock();
        let Some(running) = guard.as_mut() else {
            return Some(false);
        };
        if running.try_wait().is_ok_and(|status| status.is_some()) {
            guard.take();
            return Some(false); // it could not bind the port: another process has it
        }
        assert!(
            Instant::now() < readiness.deadline,
            "{} on port {} did not answer; see {}",
            self.what,
            readiness.port,
            self.dir.display()
        );
        if !answering {
            return None;
        }
        if owns_listener(running.id(), readiness.port) {
            return Some(true);
        }
        let since = *readiness.foreign_since.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_secs(1) {
            let _ = running.kill();
            let _ = running.wait();
            guard.take();
            return Some(false);
        }
        None
    }

    /// Spawns `command` and waits (polling `answers` every 20 ms) until it answers on `port`
    /// as its owner: false when the port turned out to be another process's.
    pub fn spawn_and_wait(
        &self,
        command: &mut Command,
        port: u16,
        timeout: Duration,
        mut answers: impl FnMut() -> bool,
    ) -> bool {
        let mut readiness = self.spawn(command, port, timeout);
        loop {
            if let Some(ours) = self.ready(&mut readiness, answers()) {
                return ours;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process id (panics when it is not running).
    pub fn pid(&self) -> u32 {
        self.lock().as_ref().map(Child::id).expect("running")
    }

    /// SIGKILL: no shutdown, no final fsync, as a crash.
    pub fn kill(&self) {
        if let Some(mut child) = self.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL to the process and every child it had forked, then waits until they have all
    /// exited: a crashed server whose children outlive it (PostgreSQL's backends keep its shared
    /// memory attached) would refuse to start again on the same data.
    pub fn kill_with_children(&self) {
        let Some(pid) = self.lock().as_ref().map(Child::id) else {
            return;
        };
        let children = children_of(pid);
        self.kill();
        for child in &children {
            let _ = Command::new("kill")
                .args(["-KILL", &child.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while children.iter().any(|&child| alive(child)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stop signal (SIGTERM unless set), then SIGKILL after `grace`.
    pub fn stop(&self, grace: Duration) {
        if let Some(mut child) = self.lock().take() {
            let _ = Command::new("kill")
                .arg(format!("-{}", self.stop_signal))
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the process: SIGSTOP makes requests hang.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal}");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `pid` and every process below it (children, their children, …), read from `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut next = 0;
    while let Some(&current) = all.get(next) {
        next += 1;
        all.extend(children_of(current));
    }
    all
}

/// The processes whose parent is `pid`: each thread's `/proc/<pid>/task/<tid>/children`, or,
/// where the kernel does not provide those files, a scan of `/proc/*/stat`.
fn children_of(pid: u32) -> Vec<u32> {
    let listed: Option<Vec<u32>> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()
        .and_then(|tasks| {
            let mut children = Vec::new();
            for task in tasks.flatten() {
                let text = std::fs::read_to_string(task.path().join("children")).ok()?;
                children.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
            Some(children)
        });
    if let Some(children) = listed {
        return children;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&candidate| stat_field(candidate, 1).as_deref() == Some(&pid.to_string()))
        .collect()
}

/// Field `index` after the command name in `/proc/<pid>/stat` (0 = state, 1 = parent pid).
fn stat_field(pid: u32, index: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or parentheses.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(index).map(str::to_owned)
}

/// True while `pid` runs (a zombie has exited: it holds no memory, files or sockets).
fn alive(pid: u32) -> bool {
    stat_field(pid, 0).is_some_and(|state| state != "Z" && state != "X")
}

/// True when process `pid` holds the socket listening on 127.0.0.1:`port` (read from `/proc`):
/// test servers confirm that the port they were given is theirs, not another process's that
/// took it between the choice and the bind.
pub fn owns_listener(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    // Local address 127.0.0.1 or 0.0.0.0 in /proc's little-endian hex; state 0A = LISTEN.
    let local = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let ours = fields.get(1).is_some_and(|a| local.iter().any(|l| l == a));
            (listening && ours)
                .then(|| fields.get(9).map(|inode| format!("socket:[{inode}]")))
                .flatten()
        })
        .collect();
    !sockets.is_empty()
        && std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| sockets.iter().any(|s| *s == target.to_string_lossy()))
            })
        })
}
