//! A fenced resource of either shape, so one demo story runs on every backend.

use std::sync::Arc;

use fence_core::{
    AppendRequest, Domain, Fence, FenceError, FencedLog, FencedStore, FencingToken, Record,
    WriteRequest,
};

/// A key-value/object store or a log.
#[derive(Clone, Debug)]
pub enum Resource {
    /// One value per domain (memory, Redis, S3).
    Store(Arc<dyn FencedStore>),
    /// Appends per domain (Kafka).
    Log(Arc<dyn FencedLog>),
}

impl Resource {
    /// The fence operations both shapes share.
    pub fn fence(&self) -> &dyn Fence {
        match self {
            Resource::Store(store) => store.as_ref(),
            Resource::Log(log) => log.as_ref(),
        }
    }

    /// Writes `text` under `token`: a put on a store, a one-record append on a log. Returns a
    /// short description of the outcome.
    pub async fn write(
        &self,
        domain: &Domain,
        token: FencingToken,
        text: &str,
    ) -> Result<String, FenceError> {
        match self {
            Resource::Store(store) => {
                let outcome = store
                    .write(&WriteRequest::put(domain.clone(), token, text.to_owned()))
                    .await?;
                Ok(format!(
                    "accepted at revision {}",
                    outcome.accepted().revision
                ))
            }
            Resource::Log(log) => {
                let record = Record::new(text.to_owned());
                log.append(&AppendRequest::new(domain.clone(), token, vec![record]))
                    .await?;
                Ok("appended in a committed transaction".to_owned())
            }
        }
    }

    /// What the resource holds for `domain` now: the latest value (store) or the last committed
    /// record (log), and a one-line summary.
    pub async fn summary(&self, domain: &Domain) -> Result<(Option<String>, String), FenceError> {
        let hwm = self.fence().high_water_mark(domain).await?;
        let hwm = hwm.map_or("-".into(), |t| t.to_string());
        match self {
            Resource::Store(store) => {
                let snapshot = store.read(domain).await?;
                let value = snapshot
                    .value()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                let summary = format!(
                    "final value: {:?} written with token {} at revision {}; high-water mark {hwm}",
                    value.clone().unwrap_or_default(),
                    snapshot.written_by().map_or("-".into(), |t| t.to_string()),
                    snapshot.revision().map_or("-".into(), |r| r.to_string()),
                );
                Ok((value, summary))
            }
            Resource::Log(log) => {
                let entries = log.read_log(domain).await?;
                let shown: Vec<String> = entries
                    .iter()
                    .map(|e| format!("{:?}@{}", String::from_utf8_lossy(&e.record.value), e.token))
                    .collect();
                let last = entries
                    .last()
                    .map(|e| String::from_utf8_lossy(&e.record.value).into_owned());
                Ok((
                    last,
                    format!(
                        "committed log (read_committed): [{}]; high-water mark {hwm}",
                        shown.join(", ")
                    ),
                ))
            }
        }
    }
}
