//! Outbox: a fenced transition recording one effect vs the usual unfenced Redis outbox (one
//! MULTI/EXEC: the state field and an XADD of the entry).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fence_core::{FencingToken, OperationId};
use fence_outbox::{DestinationRule, Effect, EffectKinds};
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};
use fence_redis::redis;

use crate::measure::CONCURRENCY;
use crate::measure::{compare, done, Plan};
use crate::redis::{setup, Setup};
use crate::report::Row;

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("outbox", "all cases", error)],
    }
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let Setup {
        fence,
        raw,
        run,
        payload,
        domains,
        probe,
        ..
    } = setup("bench-ob", "order-").await?;
    let kinds = EffectKinds::new()
        .register("send-receipt-email", DestinationRule::HttpUrl)
        .map_err(|e| e.to_string())?;
    let outbox = RedisOutbox::new(fence, kinds);
    let script = Arc::new(OutboxScript::hset());
    let ops = Arc::new(AtomicUsize::new(0));
    let mut rows = Vec::new();
    for concurrency in CONCURRENCY {
        let plan = Plan {
            rounds: 10,
            batch: 300 * concurrency.min(4),
            concurrency,
            group: 1,
        };
        let (o, d, p, s, n) = (
            outbox.clone(),
            domains.clone(),
            payload.clone(),
            script.clone(),
            ops.clone(),
        );
        let (conn, p2) = (raw.clone(), payload.clone());
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let (outbox, script) = (o.clone(), s.clone());
                let op = OperationId::new(format!("op-{}", n.fetch_add(1, Ordering::Relaxed)));
                let (domain, payload) = (d[i % d.len()].clone(), p.clone());
                async move {
                    let transition = RedisTransition::new(
                        domain,
                        FencingToken::MIN,
                        op.map_err(|e| e.to_string())?,
                    )
                    .key("order")
                    .arg("status")
                    .arg("paid")
                    .effect(Effect::new(
                        "send-receipt-email",
                        "https://mail.example/send",
                        payload,
                    ));
                    done(outbox.transition(&script, &transition).await)
                }
            },
            move |i| {
                let (mut conn, payload) = (conn.clone(), p2.clone());
                let base = format!("bench-ob-{run}-plain-{}", i % 64);
                async move {
                    redis::pipe()
                        .atomic()
                        .hset(format!("{base}:order"), "status", "paid")
                        .cmd("XADD")
                        .arg(format!("{base}:outbox"))
                        .arg("*")
                        .arg("k")
                        .arg("key")
                        .arg("t")
                        .arg("send-receipt-email")
                        .arg("d")
                        .arg("https://mail.example/send")
                        .arg("p")
                        .arg(&payload[..])
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        rows.push(Row::new(
            "outbox",
            "transition + 1 effect of 1 KiB vs unfenced writes",
            concurrency,
            &fenced,
            &unfenced,
        ));
    }
    Ok(rows)
}
