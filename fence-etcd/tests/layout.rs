//! The store folder's layouts against the real etcd: layout 2 keeps a domain's mark, entry and
//! value in one `state` key; a layout-1 folder (`mark`, `entry`, `value` keys) is read, and its
//! next change replaces it; a folder that mixes them, or whose `ops` key changed without its
//! state, fails closed; a process still writing layout 1 cannot write into a replaced folder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_conformance::services::{assert_fenced, domain as d, put, token};
use fence_core::{
    Fence, FenceError, FencedStore, FencedStoreExt, FencingToken, OperationId, WriteRequest,
};
use fence_etcd::etcd_client::{Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp};
use fence_etcd::Etcd;

/// The domain's store keys (name after the folder, value), in key order.
async fn folder(etcd: &Etcd, domain: &str) -> Vec<(String, Vec<u8>)> {
    let dir = format!("{}/store/{domain}/", etcd.prefix());
    let got = etcd
        .client()
        .kv_client()
        .get(dir.clone(), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    got.kvs()
        .iter()
        .map(|kv| {
            let name = String::from_utf8_lossy(kv.key())[dir.len()..].to_owned();
            (name, kv.value().to_vec())
        })
        .collect()
}

/// Puts a key of the domain's folder, going around Fence; answers its revision.
async fn put_raw(kv: &mut KvClient, etcd: &Etcd, domain: &str, name: &str, value: &str) -> i64 {
    let key = format!("{}/store/{domain}/{name}", etcd.prefix());
    let put = kv.put(key, value, None).await.unwrap();
    put.header().unwrap().revision()
}

/// Puts a layout-1 folder's keys as layout 1 wrote them, every key of a change in one txn;
/// answers its revision.
async fn put_layout_1(kv: &mut KvClient, etcd: &Etcd, domain: &str, keys: &[(&str, &str)]) -> i64 {
    let dir = format!("{}/store/{domain}/", etcd.prefix());
    let puts: Vec<TxnOp> = keys
        .iter()
        .map(|(name, value)| TxnOp::put(format!("{dir}{name}"), *value, None))
        .collect();
    let written = kv.txn(Txn::new().and_then(puts)).await.unwrap();
    written.header().unwrap().revision()
}

fn corrupt<T: std::fmt::Debug>(result: Result<T, FenceError>, what: &str) {
    assert!(
        matches!(result, Err(FenceError::CorruptState { .. })),
        "{what}: {result:?}"
    );
}

#[tokio::test]
async fn a_write_is_one_state_key_holding_mark_entry_and_value() {
    let Some(etcd) = support::shared("layout_state").await else {
        return;
    };
    let fence = etcd.fence();
    put(&fence, &d("one"), 4, "paid").await.unwrap();
    assert_eq!(
        folder(&etcd, "one").await,
        [(
            "state".to_owned(),
            b"fence-store/2 4 value 4 1\npaid".to_vec()
        )]
    );
    fence.claim(&d("one"), token(9)).await.unwrap();
    fence
        .write(
            &WriteRequest::delete(d("gone"), token(2)).with_op_id(OperationId::new("rm").unwrap()),
        )
        .await
        .unwrap();
    let gone = folder(&etcd, "gone").await;
    assert_eq!(gone[0], ("ops".to_owned(), b"op 2 1 - rm\n".to_vec()));
    assert_eq!(
        gone[1],
        (
            "state".to_owned(),
            b"fence-store/2 2 tombstone 2 1\n".to_vec()
        )
    );
    // The claim rewrote the state with the value the cache does not hold: read back whole.
    assert_eq!(
        folder(&etcd, "one").await,
        [(
            "state".to_owned(),
            b"fence-store/2 9 value 4 1\npaid".to_vec()
        )]
    );
}

/// A folder written by an earlier build is read as it is, its next change replaces its
/// three keys with the state key (the remembered operation ids kept), and a process still
/// writing layout 1 (mark key compared, folder compared) can no longer change it.
#[tokio::test]
async fn a_layout_1_folder_is_read_and_its_next_write_replaces_it() {
    let Some(etcd) = support::shared("layout_1").await else {
        return;
    };
    let mut kv = etcd.client().kv_client();
    let layout_1 = [
        ("mark", "5"),
        ("entry", "value 4 2"),
        ("value", "before"),
        ("ops", "op 4 2 3 pay\n"),
    ];
    let mark_version = put_layout_1(&mut kv, &etcd, "old", &layout_1).await;
    let dir = format!("{}/store/old/", etcd.prefix());
    let fence = etcd.fence();
    let read = fence.read(&d("old")).await.unwrap();
    assert_eq!(read.high_water_mark, Some(token(5)));
    assert_eq!(read.value().map(|v| v.as_ref()), Some(&b"before"[..]));
    assert_fenced(put(&fence, &d("old"), 4, "stale").await, 4, 5);

    let pay = OperationId::new("pay").unwrap();
    let replay = WriteRequest::put(d("old"), token(4), "again").with_op_id(pay);
    assert!(fence.write(&replay).await.unwrap().is_duplicate());
    let written = put(&etcd.fence(), &d("old"), 6, "after").await.unwrap();
    assert_eq!(written.accepted().revision.get(), 3);
    assert_eq!(
        folder(&etcd, "old").await,
        [
            ("ops".to_owned(), b"op 4 2 3 pay\n".to_vec()),
            (
                "state".to_owned(),
                b"fence-store/2 6 value 6 3\nafter".to_vec()
            ),
        ]
    );
    assert_fenced(put(&etcd.fence(), &d("old"), 5, "stale").await, 5, 6);

    // An earlier build's write (from ff79725 on: mark and folder compared), from the state it
    // read before, or from none: both refused.
    let mark = format!("{dir}mark");
    for version in [mark_version, 0] {
        let old_write = Txn::new()
            .when([
                Compare::mod_revision(mark.clone(), CompareOp::Equal, version),
                Compare::mod_revision(dir.clone(), CompareOp::Less, version + 1).with_prefix(),
            ])
            .and_then([TxnOp::put(mark.clone(), "7", None)]);
        assert!(!kv.txn(old_write).await.unwrap().succeeded(), "{version}");
    }
}

/// A fence that read a layout-1 folder (and so remembers it) replaces it with its next write,
/// comparing the mark key and the folder; a claim that raises the mark replaces one too, the
/// value kept.
#[tokio::test]
async fn remembered_layout_1_states_and_claims_replace_the_folder() {
    let Some(etcd) = support::shared("layout_1_cached").await else {
        return;
    };
    let mut kv = etcd.client().kv_client();
    let layout_1 = [("mark", "5"), ("entry", "value 4 2"), ("value", "before")];
    for domain in ["cached", "claimed"] {
        put_layout_1(&mut kv, &etcd, domain, &layout_1).await;
    }
    let fence = etcd.fence();
    fence.read(&d("cached")).await.unwrap();
    put(&fence, &d("cached"), 6, "after").await.unwrap();
    assert_eq!(
        folder(&etcd, "cached").await,
        [(
            "state".to_owned(),
            b"fence-store/2 6 value 6 3\nafter".to_vec()
        )]
    );
    etcd.fence().claim(&d("claimed"), token(8)).await.unwrap();
    assert_eq!(
        folder(&etcd, "claimed").await,
        [(
            "state".to_owned(),
            b"fence-store/2 8 value 4 2\nbefore".to_vec()
        )]
    );
}

#[tokio::test]
async fn a_folder_mixing_the_layouts_fails_closed_and_is_left_alone() {
    let Some(etcd) = support::shared("layout_mixed").await else {
        return;
    };
    put(&etcd.fence(), &d("mixed"), 3, "v").await.unwrap();
    let mut kv = etcd.client().kv_client();
    put_raw(&mut kv, &etcd, "mixed", "mark", "9").await;
    let fence = etcd.fence();
    corrupt(fence.read(&d("mixed")).await, "read");
    corrupt(put(&fence, &d("mixed"), 10, "w").await, "write");
    corrupt(fence.claim(&d("mixed"), token(10)).await, "claim");
    assert_eq!(folder(&etcd, "mixed").await.len(), 2);
}

/// The `ops` key changes only with the state key; an `ops` key newer than the state was
/// written around Fence: a fresh read refuses it, and a cached write with an operation id,
/// which compares it, finds it.
#[tokio::test]
async fn an_ops_key_changed_without_the_state_fails_closed() {
    let Some(etcd) = support::shared("layout_ops").await else {
        return;
    };
    let fence = etcd.fence();
    let op = |id: &str| OperationId::new(id).unwrap();
    let first = WriteRequest::put(d("ops"), token(2), "v").with_op_id(op("a"));
    fence.write(&first).await.unwrap();
    let mut kv = etcd.client().kv_client();
    put_raw(&mut kv, &etcd, "ops", "ops", "op 2 1 - a\nop 2 1 - b\n").await;
    let cached = WriteRequest::put(d("ops"), token(3), "w").with_op_id(op("c"));
    corrupt(fence.write(&cached).await, "a cached write with an op id");
    // Without an op id too: a write must not carry the forged records on as its own.
    let other = etcd.fence();
    put(&other, &d("ops-2"), 2, "v").await.unwrap();
    put_raw(&mut kv, &etcd, "ops-2", "ops", "op 9 7 - forged\n").await;
    corrupt(
        put(&other, &d("ops-2"), 3, "w").await,
        "a cached write without an op id",
    );
    corrupt(etcd.fence().read(&d("ops")).await, "read");
    let (_, ops) = &folder(&etcd, "ops").await[0];
    assert_eq!(ops, b"op 2 1 - a\nop 2 1 - b\n");
}

/// Bytes in the state key that Fence never writes fail closed, naming the domain.
#[tokio::test]
async fn a_malformed_state_key_fails_closed() {
    let Some(etcd) = support::shared("layout_bad").await else {
        return;
    };
    let mut kv = etcd.client().kv_client();
    for (name, value) in [
        ("no-header-line", "fence-store/2 3 none"),
        ("other-marker", "fence-store/3 3 none\n"),
        ("no-entry", "fence-store/2 3\n"),
        ("bytes-after-a-claim", "fence-store/2 3 none\nx"),
        (
            "bytes-after-a-tombstone",
            "fence-store/2 3 tombstone 3 1\nx",
        ),
        ("entry-above-mark", "fence-store/2 3 value 4 1\nx"),
        ("zero-mark", "fence-store/2 0 none\n"),
    ] {
        put_raw(&mut kv, &etcd, name, "state", value).await;
        let fence = etcd.fence();
        let read = fence.read(&d(name)).await;
        let error = read.as_ref().map(|_| ()).unwrap_err().to_string();
        assert!(error.contains(name), "{name}: {error}");
        corrupt(read, name);
        corrupt(fence.put(&d(name), FencingToken::MAX, "v").await, name);
        corrupt(fence.high_water_mark(&d(name)).await, name);
    }
}

/// Every change rewrites the versioned key (layout 1: `mark`) with the others: a key newer
/// than it was changed around Fence, and would fail every compare: refused, not retried.
#[tokio::test]
async fn a_layout_1_key_newer_than_its_mark_fails_closed() {
    let Some(etcd) = support::shared("layout_1_newer").await else {
        return;
    };
    let mut kv = etcd.client().kv_client();
    put_raw(&mut kv, &etcd, "newer", "mark", "5").await;
    put_raw(&mut kv, &etcd, "newer", "entry", "tombstone 4 2").await;
    let fence = etcd.fence();
    corrupt(fence.read(&d("newer")).await, "read");
    corrupt(put(&fence, &d("newer"), 6, "v").await, "write");
}
