//! Waking idle relays: transitions `NOTIFY` the outbox's channel with their partition at
//! commit; an idle relay `LISTEN`s instead of polling.

use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

/// The outbox's notification channel: `fence_outbox_<schema>`, cut to PostgreSQL's 63-byte
/// identifier limit (schema names are ASCII).
pub(crate) fn channel(schema: &str) -> String {
    let mut name = format!("fence_outbox_{schema}");
    name.truncate(63);
    name
}

/// A relay's listening connection, opened on its first idle wait and kept.
pub(crate) struct Wakeups {
    channel: String,
    listener: Option<PgListener>,
}

impl Wakeups {
    pub(crate) fn new(channel: String) -> Self {
        Wakeups {
            channel,
            listener: None,
        }
    }

    /// Returns when `partition` may have new work, or after `idle`. The first call starts
    /// listening and returns at once, so the pass that follows sees everything committed
    /// before; a lost listening connection also returns at once (notifications sent while it
    /// was down are gone, so the relay looks for itself).
    pub(crate) async fn wait(&mut self, pool: &PgPool, partition: u16, idle: Duration) {
        let Some(listener) = self.listener.as_mut() else {
            match listen(pool, &self.channel).await {
                Ok(listener) => self.listener = Some(listener),
                Err(error) => {
                    tracing::warn!(%error, "outbox relay cannot LISTEN; polling instead");
                    tokio::time::sleep(idle).await;
                }
            }
            return;
        };
        let wanted = partition.to_string();
        let woken = tokio::time::timeout(idle, async {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) if notification.payload() == wanted => return true,
                    Ok(Some(_)) => continue, // another partition's work
                    Ok(None) | Err(_) => return false,
                }
            }
        })
        .await;
        if let Ok(false) = woken {
            self.listener = None; // reconnect on the next wait
        }
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}
