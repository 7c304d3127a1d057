//! fence-core's telemetry layer: every operation through `Observed` is counted with its
//! outcome through the `metrics` facade (here, beside the recorder the adapters' tests share).

use std::time::Duration;

use fence_core::{
    Domain, Fence, FenceError, FencedStore, FencingToken, LeaseManager, MemoryFence, MemoryIssuer,
    MemoryLeases, Observed, OwnerId, Rebase, Rebaser, Retirer, TokenIssuer, WriteRequest,
};
use fence_testkit::metrics::{recording, CountingRecorder};

#[test]
fn operations_are_counted_by_outcome() -> Result<(), FenceError> {
    let recorder = CountingRecorder::default();
    recording(&recorder, async {
        {
            let store = Observed::new(MemoryFence::new());
            let d = Domain::new("metrics")?;
            // The bare adapter reports nothing: telemetry is the layer's job alone.
            let bare = MemoryFence::new();
            bare.write(&WriteRequest::put(d.clone(), FencingToken::new(9)?, "x"))
                .await?;
            let (t1, t2) = (FencingToken::new(1)?, FencingToken::new(2)?);
            store
                .write(&WriteRequest::put(d.clone(), t2, "new"))
                .await?;
            let stale = store.write(&WriteRequest::put(d.clone(), t1, "old")).await;
            assert!(stale.is_err_and(|e| e.is_fenced()));
            store.write(&WriteRequest::delete(d.clone(), t2)).await?;
            store.claim(&d, t2).await?;
            let operator = OwnerId::new("ops")?;
            store
                .rebase(&d, &Rebase::new(t1, t2, operator.clone(), "INC-1")?)
                .await?;
            store.rebases(&d).await?;
            store.retire(&d).await?;
            Observed::new(MemoryIssuer::new()).issue(&d).await?;
            let leases = Observed::new(MemoryLeases::new());
            let lease = leases
                .acquire(&d, &operator, Duration::from_secs(5))
                .await?;
            leases.holder(&d).await?;
            leases.renew(&lease, Duration::from_secs(5)).await?;
            leases.release(&lease).await?;
            let zero_ttl = leases.acquire(&d, &operator, Duration::ZERO).await;
            assert!(matches!(zero_ttl, Err(FenceError::InvalidInput(_))));
            Ok::<_, FenceError>(())
        }
    })?;
    let count = |key: &str| recorder.count(key);
    assert_eq!(
        count("fence_writes_total{backend=memory,operation=write,outcome=accepted}"),
        1
    );
    assert_eq!(
        count("fence_writes_total{backend=memory,operation=write,outcome=fenced}"),
        1
    );
    assert_eq!(
        count("fence_writes_total{backend=memory,operation=delete,outcome=accepted}"),
        1
    );
    assert_eq!(
        count("fence_operations_total{backend=memory,operation=claim,outcome=accepted}"),
        1
    );
    for (operation, times) in [
        ("rebase", 1),
        ("rebases", 1),
        ("retire", 1),
        ("issue", 1),
        ("lease", 3),
        ("lease_holder", 1),
    ] {
        let key = format!(
            "fence_operations_total{{backend=memory,operation={operation},outcome=accepted}}"
        );
        assert_eq!(count(&key), times, "{key}");
    }
    assert_eq!(
        count("fence_operations_total{backend=memory,operation=lease,outcome=invalid_input}"),
        1
    );
    // One increment per operation: writes are not counted twice.
    assert_eq!(
        count("fence_operations_total{backend=memory,operation=write,outcome=fenced}"),
        0
    );
    // And one latency sample per operation, by outcome.
    let samples = |key: &str| recorder.samples(key);
    let accepted = samples(
        "fence_operation_duration_seconds{backend=memory,operation=write,outcome=accepted}",
    );
    assert_eq!(accepted.len(), 1);
    assert!(
        accepted.iter().all(|s| (0.0..1.0).contains(s)),
        "{accepted:?}"
    );
    for key in [
        "fence_operation_duration_seconds{backend=memory,operation=write,outcome=fenced}",
        "fence_operation_duration_seconds{backend=memory,operation=delete,outcome=accepted}",
        "fence_operation_duration_seconds{backend=memory,operation=claim,outcome=accepted}",
    ] {
        assert_eq!(samples(key).len(), 1, "{key}");
    }
    Ok(())
}
