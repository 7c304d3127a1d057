//! The relay's progress records: one line each, `begin` or `settle`, in its fenced domain.

use fence_core::Domain;

/// One progress mark about entry `seq` (its Kafka offset) of `domain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Attempt `attempt` started.
    Begin {
        domain: Domain,
        seq: u64,
        attempt: u32,
    },
    /// An attempt ended: `d` delivered, `x` dead-lettered, `r` will retry.
    Settle {
        domain: Domain,
        seq: u64,
        outcome: char,
        at_ms: u64,
        error: String,
    },
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

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
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
            assert_eq!(Progress::decode(p.encode().as_bytes())?, p);
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
