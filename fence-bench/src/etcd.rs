//! etcd: a fenced write (one txn comparing the domain's state key and putting it) vs a plain
//! `put` of the same value; and the floor of any fenced write, a txn of one put and no compare,
//! vs the same `put` (etcd serves a txn slower than a put, most at high concurrency).

use std::sync::Arc;

use fence_core::{Domain, FencedStore, FencingToken, WriteRequest};
use fence_etcd::etcd_client::{Txn, TxnOp};

use crate::measure::{compare, done, Plan, CONCURRENCY};
use crate::probe::Probe;
use crate::report::Row;

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("etcd", "all cases", error)],
    }
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let endpoints =
        std::env::var("FENCE_ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2479".into());
    let run = crate::measure::run_id();
    let prefix = format!("/bench-{run}");
    let etcd = fence_etcd::Etcd::connect(&[endpoints.as_str()], None, &prefix)
        .await
        .map_err(|e| e.to_string())?;
    let (fence, client) = (etcd.fence(), etcd.client().clone());
    let domains: Arc<Vec<Domain>> = Arc::new(
        (0..64)
            .map(|i| Domain::new(format!("d{i}")))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
    );
    let payload = Arc::new(vec![b'x'; 1024]);
    let probe = Probe::server("etcd/etcd.pid");
    let mut rows = Vec::new();
    for concurrency in CONCURRENCY {
        let plan = Plan {
            rounds: 8,
            batch: 200 * concurrency.min(4),
            concurrency,
            group: 1,
        };
        let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
        let (c, p2, plain) = (client.clone(), payload.clone(), format!("{prefix}-plain/"));
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let fence = f.clone();
                let request =
                    WriteRequest::put(d[i % d.len()].clone(), FencingToken::MIN, p.to_vec());
                async move { done(fence.write(&request).await) }
            },
            move |i| {
                let (mut client, value, key) =
                    (c.clone(), p2.clone(), format!("{plain}{}", i % 64));
                async move { done(client.put(key, value.to_vec(), None).await) }
            },
        )
        .await;
        rows.push(Row::new(
            "etcd",
            "write 1 KiB vs put",
            concurrency,
            &fenced,
            &unfenced,
        ));
        let (c, p, txn_keys) = (client.clone(), payload.clone(), format!("{prefix}-txn/"));
        let (c2, p2, plain) = (client.clone(), payload.clone(), format!("{prefix}-plain/"));
        let (floor, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let (mut client, value, key) =
                    (c.clone(), p.clone(), format!("{txn_keys}{}", i % 64));
                let txn = Txn::new().and_then([TxnOp::put(key, value.to_vec(), None)]);
                async move { done(client.txn(txn).await) }
            },
            move |i| {
                let (mut client, value, key) =
                    (c2.clone(), p2.clone(), format!("{plain}{}", i % 64));
                async move { done(client.put(key, value.to_vec(), None).await) }
            },
        )
        .await;
        rows.push(Row::new(
            "etcd",
            "floor: txn of one put vs put",
            concurrency,
            &floor,
            &unfenced,
        ));
    }
    // Leave nothing behind: the run's keys, fenced and plain.
    let mut cleaner = client.clone();
    cleaner
        .delete(
            prefix.as_str(),
            Some(fence_etcd::etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(rows)
}
