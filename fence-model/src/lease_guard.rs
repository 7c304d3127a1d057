//! The lease guard against a lease server on another clock (fence-core's `LeaseGuard` with the
//! lease managers of Redis, PostgreSQL and etcd).
//!
//! A holder's guard reports the lease held until [`Lease::valid_until`](fence_core::Lease),
//! counted on the holder's clock from before each request was sent; the server counts the TTL
//! on its own clock from when it handled the request. The two clocks run at rates that differ
//! by at most the drift bound, [`MAX_CLOCK_DRIFT`]. Safety: the guard never reports "held" once
//! the server could have given the lease to another owner. The fix this model found — the
//! managers counted the whole TTL, so a holder whose clock ran slow outlived its grant — is
//! [`held_until`], which the model calls as the managers do.
//!
//! **Modelled**: time in steps of 1 % of the TTL on the server's clock, the holder's clock
//! lagging by up to the drift bound, renewals whose request and reply are each delayed
//! arbitrarily, the server granting, renewing and refusing, another owner acquiring as soon as
//! the server's count ends, the guard's loss signal. **Not modelled**: the renewal schedule and
//! its jitter (a renewal may be sent at any step), several renewals in flight (the guard sends
//! one at a time), a holder clock running *fast* (it only makes the guard give up earlier).

use std::fmt;
use std::time::{Duration, Instant};

use fence_core::raw::{held_until, MAX_CLOCK_DRIFT};
use stateright::{Model, Property};

/// How the holder counts its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Variant {
    /// fence-core's [`held_until`]: the TTL less the drift bound, from before the request.
    Fence,
    /// Broken: the whole TTL from before the request (what the managers did before the fix).
    WholeTtl,
}

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct LeaseGuardModel {
    /// Renewals the holder may send.
    pub renewals: u8,
    /// The longest delay of a request or a reply, in steps (1 % of the TTL each).
    pub max_delay: u16,
    /// How the holder counts its lease.
    pub variant: Variant,
}

/// Steps in a TTL: one step is 1 % of it, the drift bound's share.
const TTL: u16 = 100;

impl LeaseGuardModel {
    /// The bounds of `profile`, counting by `variant`.
    pub fn new(profile: crate::Profile, variant: Variant) -> Self {
        match profile {
            crate::Profile::Ci => LeaseGuardModel {
                renewals: 1,
                max_delay: 2,
                variant,
            },
            _ => LeaseGuardModel {
                renewals: 1,
                max_delay: 3,
                variant,
            },
        }
    }
}

impl fmt::Display for LeaseGuardModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease guard ({:?}): TTL {TTL} steps, drift bound {} %, {} renewal(s), delays up to {} step(s)",
            self.variant,
            MAX_CLOCK_DRIFT * 100.0,
            self.renewals,
            self.max_delay
        )
    }
}

/// A renewal on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Renewal {
    /// Sent at holder time `sent`; arrives at the server after `delay` more steps.
    Request {
        /// Holder time it was sent at.
        sent: u16,
        /// Steps before it arrives.
        delay: u16,
    },
    /// Answered (`granted` or refused); the reply arrives after `delay` more steps.
    Reply {
        /// Holder time the request was sent at.
        sent: u16,
        /// Whether the server renewed the lease.
        granted: bool,
        /// Steps before it arrives.
        delay: u16,
    },
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Server time, in steps.
    server: u16,
    /// Holder time, in steps (never ahead of the server's, behind by at most the bound).
    holder: u16,
    /// When the server's count of the holder's lease ends (server time).
    granted_until: u16,
    /// Another owner acquired the lease (the server's count had ended).
    taken_over: bool,
    /// The end of the lease by the guard's count (holder time).
    held_until: u16,
    /// The guard signalled the loss.
    lost: bool,
    renewal: Option<Renewal>,
    renewals: u8,
    /// (server, holder) times when the request the guard's count derives from was sent, and
    /// when the renewal in flight was: over each span from them, the holder's clock lags by
    /// at most the drift bound's share.
    counted_from: (u16, u16),
    in_flight_from: Option<(u16, u16)>,
}

impl State {
    /// Whether the holder's clock may stand still for the next server step: its lag grows by
    /// at most the drift bound's share of every span the guard's counts start from.
    fn may_lag(&self) -> bool {
        let lag_after = self.server + 1 - self.holder;
        [Some(self.counted_from), self.in_flight_from]
            .into_iter()
            .flatten()
            .all(|(server, holder)| {
                let grown = f64::from(lag_after - (server - holder));
                grown <= f64::from(self.server + 1 - server) * MAX_CLOCK_DRIFT
            })
    }

    fn guard_reports_held(&self) -> bool {
        !self.lost && self.holder < self.held_until
    }
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// One step of server time; the holder's clock advances one step too.
    Tick,
    /// One step of server time during which the holder's clock stands still (within the bound).
    SlowTick,
    /// The guard sends a renewal that will take `0` to `max_delay` steps to arrive.
    Renew(u16),
    /// The server handles the renewal; its reply will take this many steps to arrive.
    Handle(u16),
    /// The reply reaches the guard.
    Reply,
    /// Another owner acquires the lease.
    TakeOver,
}

/// The guard's end of a lease asked for at holder time `sent`, by `variant`'s count: the
/// real [`held_until`] for the fence.
fn counted_until(variant: Variant, sent: u16) -> u16 {
    match variant {
        Variant::Fence => {
            // One step is one millisecond here: the TTL is 100 ms.
            let base = Instant::now();
            let start = base + Duration::from_millis(u64::from(sent));
            let end = held_until(start, Duration::from_millis(u64::from(TTL)));
            // Rounded up to whole steps: a margin short of one step (the drift bound) counts
            // as none, and the checker refutes it as it refutes the whole TTL.
            let steps = end
                .saturating_duration_since(base)
                .as_nanos()
                .div_ceil(1_000_000);
            u16::try_from(steps).unwrap_or(u16::MAX)
        }
        Variant::WholeTtl => sent + TTL,
    }
}

impl Model for LeaseGuardModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // Acquired at time 0 on both clocks (the request and its reply took no time).
        vec![State {
            server: 0,
            holder: 0,
            granted_until: TTL,
            taken_over: false,
            held_until: counted_until(self.variant, 0),
            lost: false,
            renewal: None,
            renewals: 0,
            counted_from: (0, 0),
            in_flight_from: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // Once the guard signalled the loss and another owner took over, nothing new can
        // happen; nor after three TTLs, by when every count has ended.
        if !(state.lost && state.taken_over) && state.server < 3 * TTL {
            actions.push(Action::Tick);
            if state.may_lag() {
                actions.push(Action::SlowTick);
            }
        }
        match state.renewal {
            None if state.renewals < self.renewals && state.guard_reports_held() => {
                for delay in 0..=self.max_delay {
                    actions.push(Action::Renew(delay));
                }
            }
            Some(Renewal::Request { delay: 0, .. }) => {
                for delay in 0..=self.max_delay {
                    actions.push(Action::Handle(delay));
                }
            }
            Some(Renewal::Reply { delay: 0, .. }) => actions.push(Action::Reply),
            _ => {}
        }
        if !state.taken_over && state.server >= state.granted_until {
            actions.push(Action::TakeOver);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let elapse = |state: &mut State| {
            state.renewal = match state.renewal {
                Some(Renewal::Request { sent, delay }) => Some(Renewal::Request {
                    sent,
                    delay: delay.saturating_sub(1),
                }),
                Some(Renewal::Reply {
                    sent,
                    granted,
                    delay,
                }) => Some(Renewal::Reply {
                    sent,
                    granted,
                    delay: delay.saturating_sub(1),
                }),
                None => None,
            };
        };
        match action {
            Action::Tick => {
                state.server += 1;
                state.holder += 1;
                elapse(&mut state);
            }
            Action::SlowTick => {
                state.server += 1;
                elapse(&mut state);
            }
            Action::Renew(delay) => {
                state.renewal = Some(Renewal::Request {
                    sent: state.holder,
                    delay,
                });
                state.in_flight_from = Some((state.server, state.holder));
                state.renewals += 1;
            }
            Action::Handle(delay) => {
                let Some(Renewal::Request { sent, .. }) = state.renewal else {
                    return None;
                };
                // The server renews a lease it still counts as the holder's, from now.
                let granted = !state.taken_over && state.server < state.granted_until;
                if granted {
                    state.granted_until = state.server + TTL;
                }
                state.renewal = Some(Renewal::Reply {
                    sent,
                    granted,
                    delay,
                });
            }
            Action::Reply => {
                let Some(Renewal::Reply { sent, granted, .. }) = state.renewal else {
                    return None;
                };
                state.renewal = None;
                let from = state.in_flight_from.take();
                if granted {
                    state.held_until = counted_until(self.variant, sent);
                    state.counted_from = from.unwrap_or(state.counted_from);
                } else {
                    state.lost = true;
                }
            }
            Action::TakeOver => state.taken_over = true,
        }
        // The guard signals the loss once its own count ran out.
        if !state.lost && state.holder >= state.held_until {
            state.lost = true;
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NEVER_HELD_AFTER_THE_GRANT, |_, s: &State| {
                !(s.guard_reports_held() && s.server >= s.granted_until)
            }),
            Property::sometimes(THE_STORY_HAPPENS, |_, s: &State| {
                s.taken_over && s.lost && s.renewals > 0
            }),
        ]
    }
}

/// Safety: the guard never reports "held" once the server's count of the lease has ended (from
/// then on the server may give it to another owner).
pub const NEVER_HELD_AFTER_THE_GRANT: &str =
    "the guard never reports held after the server could have given the lease to another owner";
/// Reachability: a renewed lease is lost and taken over.
pub const THE_STORY_HAPPENS: &str = "a renewed lease is lost and another owner takes over";
