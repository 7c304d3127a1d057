//! Waking idle relays: transitions `NOTIFY` the outbox's channel with their partition at
//! commit; one listening connection per outbox turns each notification into a wake-up of that
//! partition's relays, counted, so none is lost between a relay's pass and its wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::Notify;

/// How long the listening task waits before checking that its outbox still exists.
const LISTEN_CHECK: Duration = Duration::from_secs(30);

/// The outbox's notification channel: `fence_outbox_<schema>`, cut to PostgreSQL's 63-byte
/// identifier limit (schema names are ASCII).
pub(crate) fn channel(schema: &str) -> String {
    let mut name = format!("fence_outbox_{schema}");
    name.truncate(63);
    name
}

/// Wake-ups of one partition: a generation counter and the waiters.
struct Partition {
    generation: AtomicU64,
    notify: Notify,
}

impl Default for Partition {
    fn default() -> Self {
        // Above every relay's initial cursor (0): each relay's first wait returns at once, so
        // its first pass starts after the listener was in place.
        Partition {
            generation: AtomicU64::new(1),
            notify: Notify::new(),
        }
    }
}

impl Partition {
    fn wake(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The wake-ups of an outbox, shared by its clones and all their relays.
pub(crate) struct Wakeups {
    channel: String,
    partitions: Mutex<HashMap<u16, Arc<Partition>>>,
    /// Whether the listening task runs; held while it starts, so only one starts.
    listening: tokio::sync::Mutex<bool>,
}

impl Wakeups {
    pub(crate) fn new(channel: String) -> Self {
        Wakeups {
            channel,
            partitions: Mutex::new(HashMap::new()),
            listening: tokio::sync::Mutex::new(false),
        }
    }

    fn partition(&self, partition: u16) -> Arc<Partition> {
        let mut partitions = self
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        partitions.entry(partition).or_default().clone()
    }

    fn wake_all(&self) {
        let partitions = self
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        partitions.values().for_each(|p| p.wake());
    }

    /// Returns when `partition` may have work the relay has not seen (`seen` is its cursor:
    /// the generation it last returned with), or after `idle`. The first call starts listening
    /// and returns at once, so the pass that follows sees everything committed before.
    pub(crate) async fn wait(
        self: &Arc<Self>,
        pool: &PgPool,
        partition: u16,
        idle: Duration,
        seen: &mut u64,
    ) {
        let part = self.partition(partition);
        let notified = part.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match self.ensure_listening(pool, idle).await {
            Listening::JustStarted => {
                *seen = part.generation.load(Ordering::SeqCst);
                return;
            }
            Listening::Unavailable => {
                tokio::time::sleep(idle).await;
                return;
            }
            Listening::Running => {}
        }
        let current = part.generation.load(Ordering::SeqCst);
        if current == *seen {
            let _ = tokio::time::timeout(idle, notified).await;
        }
        *seen = part.generation.load(Ordering::SeqCst);
    }

    async fn ensure_listening(self: &Arc<Self>, pool: &PgPool, idle: Duration) -> Listening {
        let mut listening = self.listening.lock().await;
        if *listening {
            return Listening::Running;
        }
        // Bounded: a busy pool must not hold every relay of the outbox past its idle wait.
        let listener = match tokio::time::timeout(idle, listen(pool, &self.channel)).await {
            Ok(Ok(listener)) => listener,
            Err(_) => {
                tracing::warn!(
                    channel = self.channel,
                    "outbox relay could not LISTEN in time; polling"
                );
                return Listening::Unavailable;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, channel = self.channel, "outbox relay cannot LISTEN; polling");
                return Listening::Unavailable;
            }
        };
        *listening = true;
        tokio::spawn(forward(
            listener,
            self.channel.clone(),
            Arc::downgrade(self),
        ));
        Listening::JustStarted
    }
}

enum Listening {
    JustStarted,
    Running,
    Unavailable,
}

/// Turns notifications into wake-ups until the outbox is gone. A lost connection is
/// re-established and listened on again, then every partition is woken (what was sent
/// meanwhile is gone, so the relays look for themselves).
async fn forward(mut listener: PgListener, channel: String, wakeups: Weak<Wakeups>) {
    loop {
        let received = tokio::time::timeout(LISTEN_CHECK, listener.try_recv()).await;
        let Some(outbox) = wakeups.upgrade() else {
            return;
        };
        match received {
            Err(_) => {} // quiet: check the outbox still exists, and listen on
            Ok(Ok(Some(notification))) => match notification.payload().parse::<u16>() {
                Ok(partition) => outbox.partition(partition).wake(),
                Err(_) => outbox.wake_all(),
            },
            Ok(Ok(None)) | Ok(Err(_)) => {
                drop(outbox);
                if !relisten(&mut listener, &channel, &wakeups).await {
                    return;
                }
            }
        }
    }
}

/// Re-establishes the listening connection (retrying each second while the outbox exists),
/// then wakes every partition; false once the outbox is gone.
async fn relisten(listener: &mut PgListener, channel: &str, wakeups: &Weak<Wakeups>) -> bool {
    loop {
        match listener.listen(channel).await {
            Ok(()) => {
                return match wakeups.upgrade() {
                    Some(outbox) => {
                        outbox.wake_all();
                        true
                    }
                    None => false,
                };
            }
            Err(error) => {
                tracing::warn!(%error, channel, "outbox listener lost its connection; retrying");
                if wakeups.strong_count() == 0 {
                    return false;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}
