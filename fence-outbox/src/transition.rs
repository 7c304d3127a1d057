//! A transition in a fenced database transaction: the body the SQL outboxes share.

use fence_core::{AdmittedTransaction, Begun, FencingToken};

use crate::error::OutboxError;
use crate::key::IdempotencyKey;

/// What a transition recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// The keys of the recorded effects, in order (empty for a duplicate: recorded before).
    pub keys: Vec<IdempotencyKey>,
    /// True when the op id had committed before: nothing was recorded again.
    pub duplicate: bool,
    /// The domain's mark before the (first) transition.
    pub previous_high_water_mark: Option<FencingToken>,
}

impl Recorded {
    /// What a transition recorded: `keys` (none for a `duplicate`) over a mark of
    /// `previous_high_water_mark` (for outbox backends whose transitions are not
    /// [`record_transition`]'s).
    pub fn new(
        keys: Vec<IdempotencyKey>,
        duplicate: bool,
        previous_high_water_mark: Option<FencingToken>,
    ) -> Self {
        Recorded {
            keys,
            duplicate,
            previous_high_water_mark,
        }
    }
}

/// Records a transition in the fenced transaction `begun` admitted: `record` records its
/// effects in the transaction, which then commits (an error from `record` drops it, which
/// rolls everything back, the mark included). A replayed op id records nothing: `duplicate`.
///
/// ```
/// use fence_core::{Begun, FencingToken};
/// use fence_outbox::{record_transition, IdempotencyKey, OutboxError};
/// # struct Tx(());
/// # impl std::ops::Deref for Tx { type Target = (); fn deref(&self) -> &() { &self.0 } }
/// # impl std::ops::DerefMut for Tx { fn deref_mut(&mut self) -> &mut () { &mut self.0 } }
/// # #[async_trait::async_trait]
/// # impl fence_core::AdmittedTransaction for Tx {
/// #     type Connection = ();
/// #     fn previous_high_water_mark(&self) -> Option<FencingToken> { None }
/// #     async fn commit(self) -> Result<(), fence_core::FenceError> { Ok(()) }
/// # }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// // An op id that had committed: nothing is recorded again.
/// let replayed: Begun<Tx> = Begun::Duplicate { previous_high_water_mark: None };
/// let recorded = record_transition(replayed, async |_tx| Ok(Vec::new())).await?;
/// assert!(recorded.duplicate && recorded.keys.is_empty());
/// // An admitted transaction: `record` runs in it, then it commits.
/// let admitted = Begun::Admitted(Tx(()));
/// let recorded = record_transition(admitted, async |_tx| {
///     Ok(vec![IdempotencyKey::from_recorded("order-1:7:pay:0".to_owned())])
/// })
/// .await?;
/// assert!(!recorded.duplicate && recorded.keys.len() == 1);
/// # Ok::<(), OutboxError>(()) }).unwrap();
/// ```
pub async fn record_transition<Tx>(
    begun: Begun<Tx>,
    record: impl AsyncFnOnce(&mut Tx) -> Result<Vec<IdempotencyKey>, OutboxError>,
) -> Result<Recorded, OutboxError>
where
    Tx: AdmittedTransaction,
{
    match begun {
        Begun::Duplicate {
            previous_high_water_mark,
        } => Ok(Recorded {
            keys: Vec::new(),
            duplicate: true,
            previous_high_water_mark,
        }),
        Begun::Admitted(mut tx) => {
            let previous_high_water_mark = tx.previous_high_water_mark();
            let keys = record(&mut tx).await?;
            tx.commit().await?;
            Ok(Recorded {
                keys,
                duplicate: false,
                previous_high_water_mark,
            })
        }
    }
}
