//! The read → decide → compare-and-set loop of adapters whose resource has a conditional write
//! but no server-side script (etcd's txn, S3's `If-Match`): for adapter authors.
//!
//! [`drive`] decides on the state the adapter last saw of the domain (read or written) when it
//! has one (a steady-state write is then one request), else on a fresh read; commits the decision only
//! if the resource is unchanged; and after a lost race decides again on the state now, up to
//! [`CasPolicy::max_attempts`] lost races, pausing between them as the policy says. The rule
//! itself is the decision closure's, from [`crate::raw::pipeline`].

use std::future::Future;

use crate::{Backoff, FenceError};

/// What deciding on a state asks the loop to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum Step<T, C> {
    /// Answer `T` with no write (a refusal is the closure's `Err`).
    Done(T),
    /// The state was remembered and cannot decide this: decide again on a fresh read. On a
    /// fresh state it counts as a lost race, so it cannot loop.
    Reload,
    /// Commit `change` if the resource is still in the decided state; `outcome` holds if it is.
    Commit {
        /// The adapter's conditional write.
        change: C,
        /// The answer once it applied.
        outcome: T,
    },
}

/// What a conditional write found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Committed<S, L> {
    /// It applied.
    Applied,
    /// The resource had changed, or refused for a reason worth another attempt (`loss`); `now`
    /// is the state it is in when the refusal said so (else the loop reads it again).
    Lost {
        /// Why the attempt was lost, as the adapter tells it.
        loss: L,
        /// The resource's state now, when the refusal carried it.
        now: Option<S>,
    },
}

/// A resource the loop reads and writes conditionally, for one domain and operation.
pub trait CasResource: Sync {
    /// What a decision is made on (the domain's mark, entry head, op memory and the version
    /// the conditional write compares).
    type State: Send + Sync;
    /// A decided conditional write.
    type Change: Send;
    /// Why an attempt was lost.
    type Loss: Send;

    /// The state this client last saw of the domain (read or written), if it remembers one.
    fn remembered(&self) -> Option<Self::State>;

    /// The resource's state, read now.
    fn load(&self) -> impl Future<Output = Result<Self::State, FenceError>> + Send;

    /// Writes `change` only if the resource is still in `state`. An `Err` leaves the outcome
    /// as the error says (the adapter reports `Ambiguous` for an unknown one).
    fn commit(
        &self,
        state: &Self::State,
        change: Self::Change,
    ) -> impl Future<Output = Result<Committed<Self::State, Self::Loss>, FenceError>> + Send;

    /// Whether to pause before deciding again after `loss`.
    fn pauses_after(&self, loss: &Self::Loss) -> bool;

    /// The error once `attempts` races are lost and another write is due (or a decision keeps
    /// asking to read again); `last` is the last loss, if a commit lost one (a resource that
    /// refused for load says so, not contention).
    fn exhausted(&self, attempts: u32, last: Option<Self::Loss>) -> FenceError;
}

/// How many races [`drive`] may lose, and how it pauses between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CasPolicy {
    /// Lost races before the operation fails (with [`CasResource::exhausted`]).
    pub max_attempts: u32,
    /// The pause after a lost race that pauses ([`CasResource::pauses_after`]):
    /// `delay(n - free_losses)` when it is the n-th lost race, counting every one.
    pub backoff: Backoff,
    /// Lost races taken again at once, before pauses begin.
    pub free_losses: u32,
}

/// Decides and commits an operation on `resource`; `decide` gets each state and whether it
/// was remembered. A remembered state may be behind the resource's: the closure decides which
/// answers it may give on one (a replay, or a refusal whose reported mark may lag) and asks
/// for [`Step::Reload`] for the rest.
pub async fn drive<R, T>(
    resource: &R,
    policy: CasPolicy,
    mut decide: impl FnMut(&R::State, bool) -> Result<Step<T, R::Change>, FenceError> + Send,
) -> Result<T, FenceError>
where
    R: CasResource,
    T: Send,
{
    let (mut state, mut remembered) = match resource.remembered() {
        Some(state) => (state, true),
        None => (resource.load().await?, false),
    };
    let mut lost = 0u32;
    let mut last_loss = None;
    loop {
        let (change, outcome) = match decide(&state, remembered)? {
            Step::Done(outcome) => return Ok(outcome),
            Step::Reload => {
                if !remembered {
                    // Not the contract, but bounded: a fresh state that cannot decide counts as
                    // a lost race (without a pause).
                    lost += 1;
                    if lost > policy.max_attempts {
                        return Err(resource.exhausted(policy.max_attempts, last_loss));
                    }
                }
                state = resource.load().await?;
                remembered = false;
                continue;
            }
            Step::Commit { change, outcome } => (change, outcome),
        };
        // Give up only when another write is due: the state after a lost race may answer
        // without one (a refusal, a replay).
        if lost >= policy.max_attempts {
            return Err(resource.exhausted(policy.max_attempts, last_loss));
        }
        match resource.commit(&state, change).await? {
            Committed::Applied => return Ok(outcome),
            Committed::Lost { loss, now } => {
                lost += 1;
                if resource.pauses_after(&loss) && lost > policy.free_losses {
                    tokio::time::sleep(policy.backoff.delay(lost - policy.free_losses)).await;
                }
                last_loss = Some(loss);
                state = match now {
                    Some(now) => now,
                    None => resource.load().await?,
                };
                remembered = false;
            }
        }
    }
}

/// [`drive`] for a resource whose remembered state may answer only with a write: `decide`
/// commits on a remembered state, and any other answer it gives there (a refusal, a replay, an
/// error) is decided again on a fresh read, so that what the caller hears without a write
/// comes from the resource's state, never from a cache (fence-etcd, fence-dynamodb).
pub async fn drive_fresh_answers<R, T>(
    resource: &R,
    policy: CasPolicy,
    mut decide: impl FnMut(&R::State) -> Result<Step<T, R::Change>, FenceError> + Send,
) -> Result<T, FenceError>
where
    R: CasResource,
    T: Send,
{
    drive(resource, policy, |state, remembered| match decide(state) {
        Ok(Step::Done(_)) | Err(_) if remembered => Ok(Step::Reload),
        decided => decided,
    })
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed assertion in a test panics
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// A counter behind a version check: state is `(version, value)`, a change sets the value.
    /// `losses` commits are lost first (the version moved on by one each time).
    #[derive(Default)]
    struct Scripted {
        remembered: Option<(u32, u32)>,
        server: Mutex<(u32, u32)>,
        losses: Mutex<u32>,
        loads: Mutex<u32>,
        commits: Mutex<u32>,
        carry_state: bool,
        /// Losses pause (else they are taken again at once).
        pausing: bool,
        /// Every commit fails outright.
        broken: bool,
    }

    impl CasResource for Scripted {
        type State = (u32, u32);
        type Change = u32;
        type Loss = &'static str;

        fn remembered(&self) -> Option<(u32, u32)> {
            self.remembered
        }

        async fn load(&self) -> Result<(u32, u32), FenceError> {
            *self.loads.lock().unwrap() += 1;
            Ok(*self.server.lock().unwrap())
        }

        async fn commit(
            &self,
            state: &(u32, u32),
            value: u32,
        ) -> Result<Committed<(u32, u32), &'static str>, FenceError> {
            *self.commits.lock().unwrap() += 1;
            if self.broken {
                return Err(FenceError::unsupported("test", "commit failed"));
            }
            let mut server = self.server.lock().unwrap();
            let mut losses = self.losses.lock().unwrap();
            if *losses > 0 {
                *losses -= 1;
                server.0 += 1;
            }
            if server.0 != state.0 {
                let now = self.carry_state.then_some(*server);
                return Ok(Committed::Lost { loss: "raced", now });
            }
            *server = (server.0 + 1, value);
            Ok(Committed::Applied)
        }

        fn pauses_after(&self, _: &&'static str) -> bool {
            self.pausing
        }

        fn exhausted(&self, attempts: u32, last: Option<&'static str>) -> FenceError {
            FenceError::unsupported("test", format!("exhausted after {attempts}, last {last:?}"))
        }
    }

    const POLICY: CasPolicy = CasPolicy {
        max_attempts: 3,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(2)),
        free_losses: 1,
    };

    /// Sets the value to 7 unless it is already 7.
    fn set_seven(state: &(u32, u32), _: bool) -> Result<Step<&'static str, u32>, FenceError> {
        Ok(match state.1 {
            7 => Step::Done("already"),
            _ => Step::Commit {
                change: 7,
                outcome: "set",
            },
        })
    }

    #[tokio::test]
    async fn a_remembered_state_commits_without_a_read() {
        let resource = Scripted {
            remembered: Some((0, 0)),
            ..Scripted::default()
        };
        assert_eq!(drive(&resource, POLICY, set_seven).await.unwrap(), "set");
        assert_eq!(*resource.loads.lock().unwrap(), 0);
        assert_eq!(*resource.server.lock().unwrap(), (1, 7));
    }

    #[tokio::test]
    async fn fresh_answers_come_from_a_read_not_from_what_was_remembered() {
        // Remembered: 7 (already set). The server holds 0: the answer without a write must be
        // the server's, so the remembered "already" is decided again on a read, which writes.
        let resource = Scripted {
            remembered: Some((0, 7)),
            ..Scripted::default()
        };
        let decide = |state: &(u32, u32)| set_seven(state, false);
        assert_eq!(
            drive_fresh_answers(&resource, POLICY, decide)
                .await
                .unwrap(),
            "set"
        );
        assert_eq!(*resource.loads.lock().unwrap(), 1);
        assert_eq!(*resource.server.lock().unwrap(), (1, 7));
        // A remembered state that commits needs no read.
        let resource = Scripted {
            remembered: Some((0, 0)),
            ..Scripted::default()
        };
        assert_eq!(
            drive_fresh_answers(&resource, POLICY, decide)
                .await
                .unwrap(),
            "set"
        );
        assert_eq!(*resource.loads.lock().unwrap(), 0);
    }

    #[tokio::test]
    async fn lost_races_are_decided_again_up_to_the_limit() {
        for carry_state in [false, true] {
            // Two losses: the third commit applies.
            let resource = Scripted {
                losses: Mutex::new(2),
                carry_state,
                ..Scripted::default()
            };
            assert_eq!(drive(&resource, POLICY, set_seven).await.unwrap(), "set");
            assert_eq!(*resource.commits.lock().unwrap(), 3);
            // A carried state needs no read after a loss.
            let loads = if carry_state { 1 } else { 3 };
            assert_eq!(*resource.loads.lock().unwrap(), loads);
            // Three losses exhaust it, with the last loss named.
            let resource = Scripted {
                losses: Mutex::new(3),
                carry_state,
                ..Scripted::default()
            };
            let error = drive(&resource, POLICY, set_seven).await.unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("exhausted after 3, last Some(\"raced\")"),
                "{error}"
            );
            assert_eq!(*resource.commits.lock().unwrap(), 3);
        }
    }

    #[tokio::test]
    async fn an_answer_without_a_write_stands_after_the_last_lost_race() {
        // Three lost commits; the state read after the last one answers without a write. The
        // answer stands only if that state is read and decided (not the one before it).
        let resource = Scripted {
            losses: Mutex::new(3),
            ..Scripted::default()
        };
        let outcome = drive(&resource, POLICY, |state, cached| match state.0 {
            3 => Ok(Step::Done("answered")),
            _ => set_seven(state, cached),
        })
        .await;
        assert_eq!(outcome.unwrap(), "answered");
        assert_eq!(*resource.commits.lock().unwrap(), 3);
        assert_eq!(*resource.loads.lock().unwrap(), 4);
    }

    #[tokio::test]
    async fn a_state_after_a_loss_is_never_taken_for_a_remembered_one() {
        let resource = Scripted {
            remembered: Some((0, 0)),
            losses: Mutex::new(1),
            ..Scripted::default()
        };
        let mut seen = Vec::new();
        let outcome = drive(&resource, POLICY, |state, cached| {
            seen.push(cached);
            set_seven(state, cached)
        });
        assert_eq!(outcome.await.unwrap(), "set");
        assert_eq!(seen, [true, false]);
    }

    #[tokio::test]
    async fn a_failed_commit_ends_the_loop() {
        let resource = Scripted {
            broken: true,
            ..Scripted::default()
        };
        let failed = drive(&resource, POLICY, set_seven).await.unwrap_err();
        assert!(failed.to_string().contains("commit failed"), "{failed}");
        assert_eq!(*resource.commits.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn only_losses_past_the_free_ones_pause_and_only_pausing_ones() {
        // A pause is at least half its 400 ms ceiling (equal jitter); none is well under that.
        let policy = CasPolicy {
            backoff: Backoff::new(Duration::from_millis(400), Duration::from_millis(400)),
            ..POLICY
        };
        let half = Duration::from_millis(200);
        for (losses, pausing, pauses) in [(1, true, false), (2, true, true), (2, false, false)] {
            let resource = Scripted {
                losses: Mutex::new(losses),
                pausing,
                ..Scripted::default()
            };
            let started = std::time::Instant::now();
            assert_eq!(drive(&resource, policy, set_seven).await.unwrap(), "set");
            let elapsed = started.elapsed();
            assert_eq!(
                elapsed >= half,
                pauses,
                "{losses} losses, pausing {pausing}: {elapsed:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_reload_reads_once_and_a_fresh_reload_is_bounded() {
        let resource = Scripted {
            remembered: Some((0, 0)),
            ..Scripted::default()
        };
        let outcome = drive(&resource, POLICY, |state, cached| match cached {
            true => Ok(Step::Reload),
            false => set_seven(state, cached),
        });
        assert_eq!(outcome.await.unwrap(), "set");
        assert_eq!(*resource.loads.lock().unwrap(), 1);
        // A decision that reloads fresh state forever stops at the limit.
        let resource = Scripted::default();
        let forever = drive(&resource, POLICY, |_, _| Ok(Step::<(), u32>::Reload)).await;
        assert!(forever
            .unwrap_err()
            .to_string()
            .contains("exhausted after 3"));
        assert_eq!(*resource.loads.lock().unwrap(), 4);
    }

    #[tokio::test]
    async fn reloads_of_fresh_state_are_bounded_and_keep_the_last_loss() {
        // One lost commit, then a decision that asks to reload fresh state every time: the
        // limit ends it, naming the loss a commit had.
        let resource = Scripted {
            losses: Mutex::new(1),
            ..Scripted::default()
        };
        let mut rounds = 0;
        let outcome = drive(&resource, POLICY, |state, cached| {
            rounds += 1;
            match rounds {
                1 => set_seven(state, cached),
                _ => Ok(Step::Reload),
            }
        })
        .await;
        let error = outcome.unwrap_err().to_string();
        assert!(error.contains("last Some(\"raced\")"), "{error}");
        assert_eq!(*resource.commits.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_refusal_is_returned_as_decided() {
        let resource = Scripted {
            losses: Mutex::new(1),
            ..Scripted::default()
        };
        let refused = drive(&resource, POLICY, |_, _| {
            Err::<Step<(), u32>, _>(FenceError::unsupported("test", "refused"))
        });
        assert!(refused.await.unwrap_err().to_string().contains("refused"));
        assert_eq!(*resource.commits.lock().unwrap(), 0);
    }
}
