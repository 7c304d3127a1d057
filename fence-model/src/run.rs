//! Running a model: exhaustively, breadth-first, on every core, with what was visited.

use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, Model};

/// How large the models' bounds are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// The bounds `scripts/test` checks: a few minutes in total on 2 cores.
    Ci,
    /// Larger bounds for `scripts/models` (`FENCE_MODEL_PROFILE=full`).
    Full,
}

impl Profile {
    /// `FENCE_MODEL_PROFILE` (`ci`, the default, or `full`); anything else is refused.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("FENCE_MODEL_PROFILE").as_deref() {
            Err(_) | Ok("ci") => Ok(Profile::Ci),
            Ok("full") => Ok(Profile::Full),
            Ok(other) => Err(format!(
                "FENCE_MODEL_PROFILE is `{other}`: use `ci` or `full`"
            )),
        }
    }
}

/// What a check visited.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Report {
    /// The model's name and bounds.
    pub model: String,
    /// States generated (with repeats; for a refutation, over all its searches).
    pub states: usize,
    /// Distinct states (for a refutation, of its last search).
    pub unique_states: usize,
    /// The longest path explored (for a refutation, by its last search: its depth bound when
    /// one was set).
    pub max_depth: usize,
    /// How long the check took.
    pub elapsed: Duration,
    /// For a refuted variant: the property refuted and the counterexample's steps.
    pub counterexample: Option<(&'static str, Vec<String>)>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} states ({} distinct), depth {}, {:.1} s",
            self.model,
            self.states,
            self.unique_states,
            self.max_depth,
            self.elapsed.as_secs_f64()
        )?;
        if let Some((property, steps)) = &self.counterexample {
            write!(
                f,
                "; refutes \"{property}\" in {} steps:\n  {}",
                steps.len(),
                steps.join("\n  ")
            )?;
        }
        Ok(())
    }
}

/// Breadth-first on `threads` threads, down to `depth` steps when given.
fn run<M>(name: String, model: M, threads: usize, depth: Option<usize>) -> (Report, impl Checker<M>)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + fmt::Debug + Send + Sync + Clone + PartialEq,
    M::Action: fmt::Debug + Send + Sync + Clone + PartialEq,
{
    let started = Instant::now();
    let mut builder = model.checker().threads(threads);
    if let Some(depth) = depth {
        builder = builder.target_max_depth(depth);
    }
    let checker = builder.spawn_bfs().join();
    let report = Report {
        model: name,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        counterexample: None,
    };
    (report, checker)
}

/// Checks every state `model` can reach: `Ok` when every property holds, else the first
/// property with a counterexample and its steps.
pub fn check<M>(name: impl Into<String>, model: M) -> Result<Report, Report>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + fmt::Debug + Send + Sync + Clone + PartialEq,
    M::Action: fmt::Debug + Send + Sync + Clone + PartialEq,
{
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let (mut report, checker) = run(name.into(), model, threads, None);
    for property in checker.model().properties() {
        let found = checker.discovery(property.name);
        match (property.expectation, found) {
            // An example of what must be possible: the model is not vacuous.
            (Expectation::Sometimes, Some(_)) => {}
            (Expectation::Sometimes, None) => {
                report.counterexample = Some((property.name, vec!["never reached".into()]));
                return Err(report);
            }
            (_, Some(path)) => {
                report.counterexample = Some((property.name, steps(path)));
                return Err(report);
            }
            (_, None) => {}
        }
    }
    Ok(report)
}

/// Checks a broken variant: `Ok` with the counterexample when the checker refutes `property`
/// (what a broken variant must do), `Err` when it holds everywhere.
pub fn refute<M>(
    name: impl Into<String>,
    model: M,
    property: &'static str,
) -> Result<Report, Report>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + fmt::Debug + Send + Sync + Clone + PartialEq,
    M::Action: fmt::Debug + Send + Sync + Clone + PartialEq,
{
    refute_shortening(name, model, property, SHORTEN_UP_TO)
}

/// [`refute`], looking for a shortest counterexample of up to `shorten_up_to` steps first (0:
/// none; a model whose counterexamples are mostly the passing of time gains nothing from it).
pub fn refute_shortening<M>(
    name: impl Into<String>,
    model: M,
    property: &'static str,
    shorten_up_to: usize,
) -> Result<Report, Report>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + fmt::Debug + Send + Sync + Clone + PartialEq,
    M::Action: fmt::Debug + Send + Sync + Clone + PartialEq,
{
    let refutable = model
        .properties()
        .iter()
        .any(|p| p.name == property && !matches!(p.expectation, Expectation::Sometimes));
    if !refutable {
        return Err(Report {
            model: format!(
                "{}: no always or eventually property named \"{property}\"",
                name.into()
            ),
            states: 0,
            unique_states: 0,
            max_depth: 0,
            elapsed: Duration::ZERO,
            counterexample: None,
        });
    }
    // stateright's path to a discovery is a valid run, not always a shortest one. First
    // searches bounded in depth, one step deeper each time, on one thread (breadth-first in
    // order): the first counterexample is a shortest one, and as the states within a bound
    // grow steeply with it, the last search costs about as much as all before it. Past
    // `SHORTEN_UP_TO` steps, one unbounded search on every core (such a counterexample is
    // mostly the passing of time).
    let name = name.into();
    let started = Instant::now();
    let mut states = 0;
    let mut search = |depth: Option<usize>, threads: usize| {
        let (report, checker) = run(name.clone(), model.clone(), threads, depth);
        states += report.states;
        (report, checker.discovery(property))
    };
    let mut depth = 0;
    let (mut report, found) = loop {
        depth += 1;
        if depth > shorten_up_to {
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            break search(None, threads);
        }
        let (report, found) = search(Some(depth), 1);
        if found.is_some() || report.max_depth < depth {
            // A counterexample, or every state reached within the bound: there is none.
            break (report, found);
        }
    };
    report.states = states;
    report.elapsed = started.elapsed();
    match found {
        Some(path) => {
            report.counterexample = Some((property, steps(path)));
            Ok(report)
        }
        None => Err(report),
    }
}

/// Counterexamples up to this many steps are shortened (longer ones are mostly the passing of
/// time, and searching for a shorter one costs more than it says).
const SHORTEN_UP_TO: usize = 40;

fn steps<S: fmt::Debug, A: fmt::Debug>(path: stateright::Path<S, A>) -> Vec<String> {
    // Runs of one action (the passing of time) are shown once, with their count.
    let mut shown: Vec<(String, usize)> = Vec::new();
    for action in path.into_actions() {
        let action = format!("{action:?}");
        match shown.last_mut() {
            Some((last, count)) if *last == action => *count += 1,
            _ => shown.push((action, 1)),
        }
    }
    shown
        .into_iter()
        .map(|(action, count)| match count {
            1 => action,
            _ => format!("{action} ×{count}"),
        })
        .collect()
}
