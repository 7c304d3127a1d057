//! Running the `fence` binary from a test: only the given variables set, stdin given,
//! output and exit code captured.

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::Value;

/// What one run of `fence` printed and how it exited.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }

    pub(crate) fn expect(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "exit code\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Runs `fence` with only `env` set (no variable of the caller's leaks in) and `stdin`.
pub(crate) fn fence(env: &[(&str, String)], args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fence"))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fence");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
