//! Scenario results and the assertions scenarios use.

use std::fmt;

use fence_core::{
    Accepted, AppendOutcome, Appended, BoxError, Claimed, FenceError, FencingToken, InvalidInput,
    WriteOutcome,
};

use crate::Namespace;

/// How a scenario ended when it did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held.
    Passed,
    /// The backend declares it lacks what the scenario needs; nothing was checked.
    NotApplicable(String),
}

/// A failed scenario: a check on the resource's answers that did not hold, or an operation
/// that failed where none should.
#[derive(Debug)]
pub struct Failure {
    message: String,
    unexpected_error: bool,
}

impl Failure {
    /// A check that did not hold, with what was expected and what happened.
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            unexpected_error: false,
        }
    }

    /// What an expectation helper reports when `result` is not what it expected: a wrong
    /// answer of the resource (a check that failed), unless the operation itself failed —
    /// no answer (`Backend`, `Ambiguous`, `Unreplicated`) — which is an unexpected error.
    fn unexpected<T>(message: String, result: &Result<T, FenceError>) -> Self {
        Failure {
            message,
            unexpected_error: matches!(
                result,
                Err(FenceError::Backend { .. }
                    | FenceError::Ambiguous { .. }
                    | FenceError::Unreplicated { .. })
            ),
        }
    }

    /// Whether an operation failed unexpectedly (a backend or input error passed on with `?`)
    /// rather than a check finding a wrong answer: a fault that only breaks the harness shows
    /// up as this, not as the property the scenario is about.
    pub fn is_unexpected_error(&self) -> bool {
        self.unexpected_error
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<FenceError> for Failure {
    fn from(error: FenceError) -> Self {
        Failure {
            message: format!("unexpected error: {error} ({error:?})"),
            unexpected_error: true,
        }
    }
}

impl From<InvalidInput> for Failure {
    fn from(error: InvalidInput) -> Self {
        Failure {
            message: format!("unexpected invalid input: {error}"),
            unexpected_error: true,
        }
    }
}

/// What every scenario returns.
pub type ScenarioResult = Result<Verdict, Failure>;

/// Judges a scenario's result against the adapter's declared not-applicable list (see
/// [`crate::StoreHarness::not_applicable`]) and panics on failure, so the generated test fails
/// with the message. A declared not-applicable verdict is printed and, when
/// `FENCE_CONFORMANCE_REPORT` names a file, appended to it as `adapter: scenario: why`
/// (`scripts/test` prints that file, so the list shows in every run).
pub fn report(
    adapter: &str,
    scenario: &str,
    namespace: &Namespace,
    result: ScenarioResult,
    declared: &[(&str, &str)],
) {
    let declared_why = declared
        .iter()
        .find(|(name, _)| *name == scenario)
        .map(|(_, why)| *why);
    match (result, declared_why) {
        (Ok(Verdict::Passed), None) => {}
        (Ok(Verdict::Passed), Some(why)) => panic!(
            "conformance scenario `{scenario}` ran and passed on {adapter}, which declares it not applicable ({why}): remove it from the declaration"
        ),
        (Ok(Verdict::NotApplicable(reason)), Some(why)) => {
            let line = format!("{adapter}: {scenario}: {why} ({reason})");
            eprintln!("conformance: not applicable, as declared: {line}");
            crate::services::append_to_report("FENCE_CONFORMANCE_REPORT", &line);
        }
        (Ok(Verdict::NotApplicable(reason)), None) => panic!(
            "conformance scenario `{scenario}` answered not applicable on {adapter} ({reason}), which is not in the adapter's declared list: declare it (not_applicable) or make it run"
        ),
        (Err(failure), _) => panic!(
            "conformance scenario `{scenario}` failed (namespace {}): {failure}",
            namespace.prefix()
        ),
    }
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::Failure::new(format!($($arg)+)));
        }
    };
}
pub(crate) use ensure;

/// A token from a literal.
pub(crate) fn t(value: u64) -> Result<FencingToken, Failure> {
    Ok(FencingToken::new(value)?)
}

/// Expects a write applied now.
pub(crate) fn accepted(
    what: &str,
    result: Result<WriteOutcome, FenceError>,
) -> Result<Accepted, Failure> {
    match result {
        Ok(WriteOutcome::Accepted(accepted)) => Ok(accepted),
        other => Err(Failure::unexpected(
            format!("{what}: expected accepted, got {other:?}"),
            &other,
        )),
    }
}

/// Expects an append committed now.
pub(crate) fn appended(
    what: &str,
    result: Result<AppendOutcome, FenceError>,
) -> Result<Appended, Failure> {
    match result {
        Ok(AppendOutcome::Appended(appended)) => Ok(appended),
        other => Err(Failure::unexpected(
            format!("{what}: expected appended, got {other:?}"),
            &other,
        )),
    }
}

/// Expects a claim accepted.
pub(crate) fn claimed(what: &str, result: Result<Claimed, FenceError>) -> Result<Claimed, Failure> {
    match result {
        Ok(claimed) => Ok(claimed),
        other => Err(Failure::unexpected(
            format!("{what}: expected claimed, got {other:?}"),
            &other,
        )),
    }
}

/// Expects `Fenced` with exactly these tokens.
pub(crate) fn fenced<T: fmt::Debug>(
    what: &str,
    result: Result<T, FenceError>,
    presented: u64,
    current: u64,
) -> Result<(), Failure> {
    match result {
        Err(FenceError::Fenced {
            presented: p,
            current: c,
            ..
        }) if p.get() == presented && c.get() == current => Ok(()),
        other => Err(Failure::unexpected(
            format!(
                "{what}: expected fenced (presented {presented}, current {current}), got {other:?}"
            ),
            &other,
        )),
    }
}

/// Whether the harness restarted its backend: `Ok(Some(verdict))` ends the scenario as not
/// applicable (a cluster the harness does not own, such as a user's production cluster).
pub(crate) fn restarted(
    result: Result<bool, BoxError>,
    declared: crate::NotApplicable,
    scenario: &str,
) -> Result<Option<Verdict>, Failure> {
    match result {
        Ok(true) => Ok(None),
        // A backend whose only server here keeps its state in memory (moto for DynamoDB)
        // cannot show this: allowed only as the adapter's reviewed declaration.
        Ok(false) if declared.iter().any(|(name, _)| *name == scenario) => Ok(Some(
            Verdict::NotApplicable("the harness declares its server cannot keep state across a restart".into()),
        )),
        // Under the project's test command every backend is a server the test owns: a harness
        // that cannot restart it would let the scenario pass without checking anything.
        Ok(false) if crate::services::required() => Err(Failure::new(
            "the harness cannot restart this backend, and FENCE_REQUIRE_SERVICES=1 requires every restart scenario to run",
        )),
        Ok(false) => Ok(Some(Verdict::NotApplicable(
            "the harness cannot restart this backend (not a server it owns)".into(),
        ))),
        Err(error) => Err(Failure::new(format!("restart failed: {error}"))),
    }
}
