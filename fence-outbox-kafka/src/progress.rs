//! The relay's progress records: one line each, `begin` or `settle`, in its fenced domain.

use fence_core::Domain;

/// One progress mark about entry `seq` (its Kafka offset) of `domain`: the value of a relay's
/// `FENCE-OUTBOX-PROGRESS/1` record (FORMATS.md §5.3), for tools that read the topic.
///
/// ```
/// use fence_outbox_kafka::Progress;
/// let value = b"FENCE-OUTBOX-PROGRESS/1\tsettle\torder/42\t1841\td\t1700000000500\t";
/// match Progress::decode(value)? {
///     Progress::Settle { domain, seq, outcome, .. } => {
///         assert_eq!((domain.as_str(), seq, outcome), ("order/42", 1841, 'd'));
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), fence_outbox_kafka::ProgressDecodeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// Attempt `attempt` started.
    Begin {
        /// The entry's domain.
        domain: Domain,
        /// The entry's offset in its data partition.
        seq: u64,
        /// The attempt's number, from 1.
        attempt: u32,
    },
    /// An attempt ended: `d` delivered, `x` dead-lettered, `r` will retry.
    Settle {
        /// The entry's domain.
        domain: Domain,
        /// The entry's offset in its data partition.
        seq: u64,
        /// `d`, `x` or `r`.
        outcome: char,
        /// When it ended (ms since the Unix epoch, the relay's clock).
        at_ms: u64,
        /// The sink's error (empty when delivered).
        error: String,
    },
}

/// Why bytes are not a progress record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a relay progress record: {reason}")]
pub struct ProgressDecodeError {
    /// What is malformed.
    pub reason: String,
}

const FORMAT: &str = "FENCE-OUTBOX-PROGRESS/1";

impl Progress {
    /// Tab-separated; the domain has no control characters and the error comes last.
    pub(crate) fn encode(&self) -> String {
        match self {
            Progress::Begin {
                domain,
                seq,
                attempt,
            } => format!("{FORMAT}\tbegin\t{}\t{seq}\t{attempt}", domain.as_str()),
            Progress::Settle {
                domain,
                seq,
                outcome,
                at_ms,
                error,
            } => format!(
                "{FORMAT}\tsettle\t{}\t{seq}\t{outcome}\t{at_ms}\t{error}",
                domain.as_str()
            ),
        }
    }

    /// Decodes a progress record's value.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProgressDecodeError> {
        Self::parse(bytes).map_err(|reason| ProgressDecodeError { reason })
    }

    fn parse(bytes: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "progress record is not UTF-8")?;
        let mut fields = text.splitn(7, '\t');
        if fields.next() != Some(FORMAT) {
            return Err("progress record has an unknown format".into());
        }
        let kind = fields.next().unwrap_or_default();
        let domain = Domain::new(fields.next().unwrap_or_default())
            .map_err(|e| format!("progress record names a bad domain: {e}"))?;
        let number = |field: Option<&str>| -> Result<u64, String> {
            field
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| "progress record has a bad number".to_owned())
        };
        let seq = number(fields.next())?;
        match kind {
            "begin" => Ok(Progress::Begin {
                domain,
                seq,
                attempt: u32::try_from(number(fields.next())?)
                    .map_err(|_| "attempt count out of range")?,
            }),
            "settle" => {
                let outcome = match fields.next() {
                    Some("d") => 'd',
                    Some("x") => 'x',
                    Some("r") => 'r',
                    _ => return Err("progress record has an unknown outcome".into()),
                };
                Ok(Progress::Settle {
                    domain,
                    seq,
                    outcome,
                    at_ms: number(fields.next())?,
                    error: fields.next().unwrap_or_default().to_owned(),
                })
            }
            _ => Err("progress record has an unknown kind".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_round_trips_and_garbage_is_refused() -> Result<(), String> {
        let domain = Domain::new("order/7 ä").map_err(|e| e.to_string())?;
        for p in [
            Progress::Begin {
                domain: domain.clone(),
                seq: 42,
                attempt: 3,
            },
            Progress::Settle {
                domain,
                seq: 42,
                outcome: 'x',
                at_ms: 1_700_000_000_000,
                error: "HTTP 500\twith\ttabs\nand lines".into(),
            },
        ] {
            assert_eq!(
                Progress::decode(p.encode().as_bytes()).map_err(|e| e.to_string())?,
                p
            );
        }
        for bad in [
            "",
            "FENCE-OUTBOX-PROGRESS/2\tbegin\td\t1\t1",
            "FENCE-OUTBOX-PROGRESS/1\tbegin\td\tx\t1",
            "FENCE-OUTBOX-PROGRESS/1\tsettle\td\t1\tq\t5\t",
            "FENCE-OUTBOX-PROGRESS/1\tjump\td\t1",
        ] {
            assert!(Progress::decode(bad.as_bytes()).is_err(), "{bad}");
        }
        Ok(())
    }
}
