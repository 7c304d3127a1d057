//! The ledger's layout record: the partition counts the domain hashes were taken over, so that
//! a fence never runs on topics whose partitions were added since (a domain would move to a
//! partition without its ledger record, and look new to a stale token).
//!
//! One record per ledger topic, in its partition 0, under a key no domain can have (domains
//! hold no control character; the key starts with NUL):
//!
//! ```text
//! FENCE-KAFKA-LAYOUT/1
//! ledger 3                 (the ledger topic's partition count)
//! data payments 12         (a data topic whose domains are placed by hash, and its count)
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fence_core::FenceError;

use crate::client::{blocking, read_partition};
use crate::error::{backend, KafkaFenceError};
use crate::fence::{KafkaFence, Partitions};
use crate::partitioning::Partitioning;
use crate::txn::Outgoing;

/// The key of the layout record.
pub(crate) const LAYOUT_KEY: &[u8] = b"\0fence-layout";
const MAGIC: &str = "FENCE-KAFKA-LAYOUT/1";

/// The partition counts a ledger's domains were placed by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) ledger_partitions: Option<i32>,
    /// Data topics placed by domain hash, with their partition counts.
    pub(crate) data: BTreeMap<String, i32>,
}

impl Layout {
    pub(crate) fn encode(&self) -> String {
        let mut text = format!("{MAGIC}\n");
        if let Some(n) = self.ledger_partitions {
            let _ = writeln!(text, "ledger {n}");
        }
        for (topic, n) in &self.data {
            let _ = writeln!(text, "data {topic} {n}");
        }
        text
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "layout record is not UTF-8")?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!("layout record has no {MAGIC} header"));
        }
        let count = |n: &str| {
            fence_core::raw::parse_count(n)
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| format!("layout partition count `{n}` is not canonical"))
        };
        let mut layout = Layout::default();
        for line in lines {
            match line.split(' ').collect::<Vec<_>>()[..] {
                ["ledger", n] if layout.ledger_partitions.is_none() && layout.data.is_empty() => {
                    layout.ledger_partitions = Some(count(n)?);
                }
                ["data", topic, n] if !layout.data.contains_key(topic) => {
                    layout.data.insert(topic.to_owned(), count(n)?);
                }
                _ => {
                    return Err(format!(
                        "unknown layout line `{}`",
                        line.chars().take(60).collect::<String>()
                    ))
                }
            }
        }
        Ok(layout)
    }
}

/// How often a fence writes the layout record before giving up: each write merges what the
/// last read showed, so fences starting together converge in a few rounds.
const RECORD_ATTEMPTS: usize = 4;

impl KafkaFence {
    /// The ledger's layout record, if one was written.
    pub(crate) async fn stored_layout(&self) -> Result<Option<Layout>, FenceError> {
        let ledger = &self.inner.ledger_topic;
        let (clients, topic, timeout) = (
            self.inner.clients.clone(),
            ledger.clone(),
            self.inner.timeout,
        );
        let messages = blocking(move || read_partition(&clients, &topic, 0, 0, timeout))
            .await
            .map_err(|e| backend(None, e))?
            .map_err(|e| backend(None, e))?;
        match messages
            .iter()
            .rev()
            .find(|m| m.key.as_deref() == Some(LAYOUT_KEY))
        {
            None => Ok(None),
            Some(message) => Layout::decode(&message.value).map(Some).map_err(|why| {
                backend(
                    None,
                    KafkaFenceError::Ledger(format!("the layout record of `{ledger}`: {why}")),
                )
            }),
        }
    }

    /// The layout with this fence's counts added to `stored`; refused when a count it holds
    /// differs from the count `now`.
    pub(crate) fn wanted_layout(
        &self,
        stored: Option<&Layout>,
        now: Partitions,
    ) -> Result<Layout, FenceError> {
        let mut wanted = stored.cloned().unwrap_or_default();
        let changed = |topic: &str, was: i32, now: i32| {
            backend(
                None,
                KafkaFenceError::PartitionsChanged {
                    topic: topic.to_owned(),
                    was,
                    now,
                },
            )
        };
        let ledger = &self.inner.ledger_topic;
        match wanted.ledger_partitions {
            Some(was) if was != now.ledger => return Err(changed(ledger, was, now.ledger)),
            _ => wanted.ledger_partitions = Some(now.ledger),
        }
        // Only domain-hash placement depends on the data topic's count.
        if matches!(self.inner.partitioning, Partitioning::DomainHash) {
            let data = &self.inner.data_topic;
            match wanted.data.get(data) {
                Some(&was) if was != now.data => return Err(changed(data, was, now.data)),
                _ => {
                    wanted.data.insert(data.clone(), now.data);
                }
            }
        }
        Ok(wanted)
    }

    /// Records this fence's counts in the ledger's layout record before its first change (a
    /// read needs no write access): re-read after every write, since another fence of the
    /// same ledger may write its own entry at the same time.
    pub(crate) async fn record_layout(&self) -> Result<(), FenceError> {
        self.inner
            .layout_recorded
            .get_or_try_init(|| async {
                let now = self.partitions().await?;
                for _ in 0..RECORD_ATTEMPTS {
                    let stored = self.stored_layout().await?;
                    let wanted = self.wanted_layout(stored.as_ref(), now)?;
                    if stored.as_ref() == Some(&wanted) {
                        return Ok(());
                    }
                    let ledger = self.inner.ledger_topic.clone();
                    self.produce_plain(Outgoing::plain(ledger, 0, LAYOUT_KEY, wanted.encode()))
                        .await?;
                }
                Err(backend(
                    None,
                    KafkaFenceError::Ledger(format!(
                        "the layout record of `{}` kept changing under other writers",
                        self.inner.ledger_topic
                    )),
                ))
            })
            .await
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_of_formats_md_decodes() {
        // FORMATS.md §4.4's example: the text block after the section's heading.
        let formats = include_str!("../../FORMATS.md");
        let section = formats
            .split_once("### 4.4 Layout record")
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        let example = section
            .split("```text\n")
            .nth(1)
            .and_then(|block| block.split_once("```"))
            .map(|(text, _)| text)
            .unwrap_or_default();
        assert_eq!(
            Layout::decode(example.as_bytes()),
            Ok(Layout {
                ledger_partitions: Some(1),
                data: [("orders".to_owned(), 12)].into(),
            })
        );
    }

    #[test]
    fn round_trips_and_refuses_garbage() {
        let layout = Layout {
            ledger_partitions: Some(3),
            data: [("payments".to_owned(), 12), ("orders".to_owned(), 1)].into(),
        };
        assert_eq!(
            layout.encode(),
            "FENCE-KAFKA-LAYOUT/1\nledger 3\ndata orders 1\ndata payments 12\n"
        );
        assert_eq!(Layout::decode(layout.encode().as_bytes()), Ok(layout));
        for bad in [
            "",
            "ledger 3",
            "FENCE-KAFKA-LAYOUT/1\nledger 0",
            "FENCE-KAFKA-LAYOUT/1\nledger 3\nledger 3",
            "FENCE-KAFKA-LAYOUT/1\ndata t 03",
            "FENCE-KAFKA-LAYOUT/1\ndata t 1\ndata t 2",
            "FENCE-KAFKA-LAYOUT/1\nowner x",
        ] {
            assert!(Layout::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
