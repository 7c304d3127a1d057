//! What a command prints, and the exit code that says how it ended.

use std::process::ExitCode;

use fence_core::{BackendErrorKind, Entry, FenceError, FencingToken};
use serde_json::{json, Value};

/// How a command ended: its exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Done.
    Done = 0,
    /// Failed for another reason (a lease held, unsupported, permission denied...).
    Failed = 1,
    /// Bad usage or input (clap uses 2 for usage errors too).
    Usage = 2,
    /// The fence refused the token: stale, too far above the mark, or never issued.
    Refused = 3,
    /// The domain, object or key does not exist.
    NotFound = 4,
    /// Corrupt or foreign state where the fence expected its own.
    Corrupt = 5,
    /// The resource could not be reached or is overloaded: a retry may help.
    Unavailable = 6,
    /// The request was sent and its outcome is unknown.
    Ambiguous = 7,
    /// `qualify`: the endpoint was refused, or a property failed.
    NotQualified = 8,
    /// `qualify`: nothing failed, but the run did not prove the properties (nothing refused or
    /// accepted, the final state unread, or windows the linearizability search left unsearched).
    Inconclusive = 9,
}

/// A command's result: JSON for `--json`, text for people, and the exit code.
#[derive(Debug)]
pub(crate) struct Report {
    exit: Exit,
    json: Value,
    text: String,
    /// An error report (printed to stderr as text) rather than a result.
    error: bool,
}

impl Report {
    /// A command that did what it was asked.
    pub(crate) fn done(json: Value, text: String) -> Self {
        Report {
            exit: Exit::Done,
            json,
            text,
            error: false,
        }
    }

    /// A command whose target does not exist (still a report: it says so).
    pub(crate) fn not_found(json: Value, text: String) -> Self {
        Report {
            exit: Exit::NotFound,
            json,
            text,
            error: false,
        }
    }

    /// `qualify`'s verdict when the endpoint did not qualify (still a report: it says why).
    pub(crate) fn not_qualified(json: Value, text: String) -> Self {
        Report {
            exit: Exit::NotQualified,
            json,
            text,
            error: false,
        }
    }

    /// The exit code it will end with.
    #[cfg(test)]
    pub(crate) fn exit(&self) -> Exit {
        self.exit
    }

    /// The JSON document it prints with `--json`.
    #[cfg(test)]
    pub(crate) fn json(&self) -> &Value {
        &self.json
    }

    /// `qualify`'s verdict when nothing failed but nothing was proven either.
    pub(crate) fn inconclusive(json: Value, text: String) -> Self {
        Report {
            exit: Exit::Inconclusive,
            json,
            text,
            error: false,
        }
    }

    /// Adds `key` to the JSON document and, when given, a line to the text.
    pub(crate) fn note(&mut self, key: &str, value: Value, line: Option<&str>) {
        self.json[key] = value;
        if let Some(line) = line {
            self.text.push('\n');
            self.text.push_str(line);
        }
    }

    /// Turns a report that would exit 0 into a failure of `class` (exit 1) with `message`,
    /// saying whether a retry can help; others keep theirs.
    pub(crate) fn fail_if_done(&mut self, class: &str, message: &str, retryable: bool) {
        if self.exit == Exit::Done {
            self.exit = Exit::Failed;
            self.json["error"] =
                json!({ "class": class, "message": message, "retryable": retryable });
        }
    }

    /// A bad argument or configuration, found before any request.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        let message = message.into();
        Report {
            exit: Exit::Usage,
            json: json!({ "error": { "class": "usage", "message": message, "retryable": false } }),
            text: message,
            error: true,
        }
    }

    /// The same message under another exit code and error class.
    pub(crate) fn with_exit(mut self, exit: Exit, class: &str) -> Self {
        self.exit = exit;
        self.json["error"]["class"] = class.into();
        self
    }

    /// A failed operation, classified by what the library says about it.
    pub(crate) fn failed(error: &FenceError) -> Self {
        let exit = exit_of(error);
        let class = match exit {
            Exit::Refused => "refused",
            Exit::NotFound => "not_found",
            Exit::Corrupt => "corrupt",
            Exit::Unavailable => "unavailable",
            Exit::Ambiguous => "ambiguous",
            Exit::Usage => "invalid_input",
            Exit::Done | Exit::Failed | Exit::NotQualified | Exit::Inconclusive => "failed",
        };
        let retryable = error.is_retryable();
        let mut text = error.to_string();
        text.push_str(if retryable {
            " (a retry may help)"
        } else {
            " (retrying the same request will not help)"
        });
        Report {
            exit,
            json: json!({ "error": { "class": class, "message": error.to_string(), "retryable": retryable } }),
            text,
            error: true,
        }
    }

    /// Prints the report (text to stdout when it succeeded, to stderr otherwise; JSON always to
    /// stdout, so scripts read one document) and returns the exit code.
    pub(crate) fn print(&self, json: bool) -> ExitCode {
        if json {
            println!("{}", self.json);
        } else if !self.error {
            println!("{}", self.text);
        } else {
            eprintln!("fence: {}", self.text);
        }
        ExitCode::from(self.exit as u8)
    }
}

fn exit_of(error: &FenceError) -> Exit {
    match error {
        FenceError::Fenced { .. }
        | FenceError::TokenTooFar { .. }
        | FenceError::Unissued { .. } => Exit::Refused,
        FenceError::CorruptState { .. } => Exit::Corrupt,
        FenceError::Ambiguous { .. } => Exit::Ambiguous,
        FenceError::InvalidInput(_) => Exit::Usage,
        FenceError::Backend { kind, .. } => match kind {
            BackendErrorKind::Unavailable => Exit::Unavailable,
            BackendErrorKind::NotFound => Exit::NotFound,
            _ => Exit::Failed,
        },
        _ => Exit::Failed,
    }
}

/// A token as JSON: a string, since tokens reach 2^64 - 1 and JSON readers often parse numbers
/// as doubles.
pub(crate) fn token_json(token: Option<FencingToken>) -> Value {
    token.map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// A value as JSON: `value` as text when it is UTF-8, else `value_hex`; always its size.
pub(crate) fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "size": bytes.len(), "value": text }),
        Err(_) => json!({ "size": bytes.len(), "value": null, "value_hex": hex(bytes) }),
    }
}

/// An entry as JSON: its state, writer token and revision, and a value's bytes.
pub(crate) fn entry_json(entry: &Entry) -> Value {
    match entry {
        Entry::Value {
            value,
            token,
            revision,
        } => {
            let mut json = bytes_json(value);
            json["state"] = "value".into();
            json["token"] = token.to_string().into();
            json["revision"] = revision.get().into();
            json
        }
        Entry::Tombstone { token, revision } => json!({
            "state": "tombstone", "token": token.to_string(), "revision": revision.get()
        }),
        _ => json!({ "state": "absent" }),
    }
}

/// An entry for people.
pub(crate) fn entry_text(entry: &Entry) -> String {
    match entry {
        Entry::Value {
            value,
            token,
            revision,
        } => format!(
            "value {}, written with token {token} at revision {revision}",
            bytes_text(value)
        ),
        Entry::Tombstone { token, revision } => {
            format!("tombstone, deleted with token {token} at revision {revision}")
        }
        _ => "absent".to_owned(),
    }
}

/// A value for people: quoted text up to 200 characters, else its size.
pub(crate) fn bytes_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.chars().count() <= 200 => format!("{text:?} ({} bytes)", bytes.len()),
        _ => format!("{} bytes", bytes.len()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
