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
#[derive(Default)]
struct Partition {
    generation: AtomicU64,
    notify: Notify,
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
        match self.ensure_listening(pool).await {
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

    async fn ensure_listening(self: &Arc<Self>, pool: &PgPool) -> Listening {
        let mut listening = self.listening.lock().await;
        if *listening {
            return Listening::Running;
        }
        let listener = match listen(pool, &self.channel).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(%error, channel = self.channel, "outbox relay cannot LISTEN; polling");
                return Listening::Unavailable;
            }
        };
        *listening = true;
        tokio::spawn(forward(listener, Arc::downgrade(self)));
        Listening::JustStarted
    }
}

enum Listening {
    JustStarted,
    Running,
    Unavailable,
}

/// Turns notifications into wake-ups until the outbox is gone. A lost connection wakes every
/// partition (what was sent meanwhile is gone); the listener reconnects and listens again.
async fn forward(mut listener: PgListener, wakeups: Weak<Wakeups>) {
    loop {
        let received = tokio::time::timeout(LISTEN_CHECK, listener.try_recv()).await;
        let Some(wakeups) = wakeups.upgrade() else {
            return;
        };
        match received {
            Err(_) => {} // quiet: check the outbox still exists, and listen on
            Ok(Ok(Some(notification))) => match notification.payload().parse::<u16>() {
                Ok(partition) => wakeups.partition(partition).wake(),
                Err(_) => wakeups.wake_all(),
            },
            Ok(Ok(None)) => wakeups.wake_all(),
            Ok(Err(error)) => {
                tracing::warn!(%error, "outbox listener failed; retrying");
                wakeups.wake_all();
                drop(wakeups);
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
