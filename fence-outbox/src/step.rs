//! What the SQL stores' relay steps share: how a step waits for a domain's row, and the
//! domain's progress it read under that row's lock.

/// How a relay step waits for a domain's row held by another transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepLock {
    /// Wait for it (settling a delivery must be recorded).
    Wait,
    /// Skip the domain (`FOR UPDATE SKIP LOCKED`): a writer or another relay is on it now.
    SkipLocked,
}

impl StepLock {
    /// What follows `FOR UPDATE` in the step's locking read.
    ///
    /// ```
    /// use fence_outbox::step::StepLock;
    /// assert_eq!(StepLock::SkipLocked.clause(), " SKIP LOCKED");
    /// assert_eq!(StepLock::Wait.clause(), "");
    /// ```
    pub fn clause(self) -> &'static str {
        match self {
            StepLock::Wait => "",
            StepLock::SkipLocked => " SKIP LOCKED",
        }
    }
}

/// A domain's progress, read by a relay step under the domain's row lock: entries `1..=last`
/// recorded, `1..=done` settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepProgress {
    last: u64,
    done: u64,
}

impl StepProgress {
    /// The progress read, or `None` when it cannot be an outbox's (more settled than recorded,
    /// or a negative count): the caller reports the row corrupt.
    ///
    /// ```
    /// use fence_outbox::step::StepProgress;
    /// let progress = StepProgress::new(5_i64, 2_i64).unwrap();
    /// assert!(progress.is_head(3));
    /// assert!(!progress.is_head(2) && !progress.is_head(4));
    /// assert!(StepProgress::new(5_u64, 5_u64).is_some_and(|p| !p.is_head(6)));
    /// assert_eq!(StepProgress::new(2_i64, 3_i64), None);
    /// assert_eq!(StepProgress::new(2_i64, -1_i64), None);
    /// ```
    pub fn new<N: TryInto<u64>>(last: N, done: N) -> Option<Self> {
        let (last, done) = (last.try_into().ok()?, done.try_into().ok()?);
        (done <= last).then_some(StepProgress { last, done })
    }

    /// True when `seq` is the domain's head entry: the next one to settle.
    pub fn is_head(&self, seq: u64) -> bool {
        self.done.checked_add(1) == Some(seq) && seq <= self.last
    }
}
