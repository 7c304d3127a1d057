//! What operators inspect on real Redis, standalone and Cluster: the operation ids a domain
//! remembers, with the token, kind, previous mark and outcome each was stored with.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{domain as d, token as t};
use fence_core::{FencedStore, OpKind, OperationId, WriteRequest};
use fence_testkit::redis::{shared_cluster_fence, shared_fence};

#[tokio::test]
async fn remembered_operation_ids_are_listed() {
    let (Some(standalone), Some(cluster)) = (
        shared_fence("inspect-ops").await,
        shared_cluster_fence("inspect-ops").await,
    ) else {
        return;
    };
    for fence in [standalone, cluster] {
        let domain = d("orders/7");
        assert!(fence.remembered_ops(&domain).await.unwrap().is_empty());
        for (token, op, value) in [(3, "pay 1", "paid"), (5, "ship*1", "shipped")] {
            let op = OperationId::new(op).unwrap();
            let request = WriteRequest::put(domain.clone(), t(token), value).with_op_id(op);
            fence.write(&request).await.unwrap();
        }
        // Another domain's op ids are not listed.
        let other = WriteRequest::put(d("orders/8"), t(9), "x")
            .with_op_id(OperationId::new("pay 1").unwrap());
        fence.write(&other).await.unwrap();

        let ops = fence.remembered_ops(&domain).await.unwrap();
        let seen: Vec<_> = ops
            .iter()
            .map(|op| {
                (
                    op.token,
                    op.op_id.as_str(),
                    op.kind,
                    op.previous,
                    op.outcome.as_str(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (t(3), "pay 1", OpKind::Write, None, "1"),
                (t(5), "ship*1", OpKind::Write, Some(t(3)), "2"),
            ]
        );
    }
}
