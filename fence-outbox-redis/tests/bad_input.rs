//! Bad input gets a typed error and loses nothing: unknown kinds, bad destinations, oversized
//! payloads, foreign or corrupt outbox state, unreachable servers, bad relay configuration.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_core::{Fence, FenceError, OwnerId};
use fence_outbox::{
    Effect, EntryStatus, OutboxConfig, OutboxError, RelayConfig, RetryPolicy,
    DEFAULT_MAX_PAYLOAD_BYTES,
};
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};
use fence_redis::{redis, RedisFence};
use support::{domain, fast_relay, op, outbox, relay, token, wait_for, webhook, WebhookServer};

fn with_effect(effect: Effect) -> RedisTransition {
    RedisTransition::new(domain("order-bad"), token(1), op("pay"))
        .key("order")
        .arg("status")
        .arg("paid")
        .effect(effect)
}

async fn assert_nothing_recorded(outbox: &RedisOutbox) {
    let d = domain("order-bad");
    assert!(outbox.entries(&d).await.unwrap().is_empty());
    assert_eq!(
        outbox.fence().high_water_mark(&d).await.unwrap(),
        None,
        "no I/O happened"
    );
}

#[tokio::test]
async fn bad_effects_are_refused_before_any_io() {
    let Some(fence) = support::standalone("bad-effects").await else {
        return;
    };
    let outbox = outbox(&fence);
    let script = OutboxScript::hset();
    let cases: Vec<(RedisTransition, &str)> = vec![
        (
            with_effect(Effect::new("send-sms", "https://sms.example", "x")),
            "unknown kind",
        ),
        (
            with_effect(Effect::new(
                "send-receipt-email",
                "ftp://mail.example/x",
                "x",
            )),
            "ftp URL",
        ),
        (
            with_effect(Effect::new("send-receipt-email", "mail.example/x", "x")),
            "relative URL",
        ),
        (
            with_effect(Effect::new("send-receipt-email", "https://", "x")),
            "no host",
        ),
        (
            with_effect(Effect::new("enqueue", "", "x")),
            "empty destination",
        ),
        (
            with_effect(Effect::new(
                "send-receipt-email",
                "https://mail.example/x",
                vec![b'x'; DEFAULT_MAX_PAYLOAD_BYTES + 1],
            )),
            "oversized payload",
        ),
        (
            (0..17).fold(
                RedisTransition::new(domain("order-bad"), token(1), op("many")),
                |t, i| t.effect(Effect::new("enqueue", "q", format!("{i}"))),
            ),
            "too many effects",
        ),
        (
            RedisTransition::new(domain("order-bad"), token(1), op("reserved")).key("ob:meta"),
            "reserved key name",
        ),
    ];
    for (transition, what) in cases {
        let error = outbox.transition(&script, &transition).await.unwrap_err();
        println!("bad input: {what} -> {error}");
        let typed = matches!(
            (&error, what),
            (OutboxError::UnknownKind { .. }, "unknown kind")
                | (
                    OutboxError::InvalidDestination { .. },
                    "ftp URL" | "relative URL" | "no host" | "empty destination"
                )
                | (OutboxError::PayloadTooLarge { .. }, "oversized payload")
                | (OutboxError::TooManyEffects { .. }, "too many effects")
                | (OutboxError::InvalidName { .. }, "reserved key name")
        );
        assert!(typed, "{what}: {error:?}");
        assert!(
            error.to_string().contains("order-bad") || what == "reserved key name",
            "{error}"
        );
    }
    assert_nothing_recorded(&outbox).await;
}

#[tokio::test]
async fn foreign_or_corrupt_outbox_state_is_refused_and_left_untouched() {
    let Some(fence) = support::standalone("corrupt").await else {
        return;
    };
    let outbox = outbox(&fence);
    let d = domain("order-bad");
    let meta = fence.user_key(&d, "ob:meta").unwrap();
    let entries = fence.user_key(&d, "ob:entries").unwrap();
    let script = OutboxScript::hset();
    let t = with_effect(Effect::new("enqueue", "q", "x"));
    let setups: Vec<(&str, Vec<redis::Cmd>)> = vec![
        (
            "meta is a list",
            vec![redis::cmd("RPUSH").arg(&meta).arg("foreign").clone()],
        ),
        (
            "meta without marker",
            vec![redis::cmd("HSET")
                .arg(&meta)
                .arg("owner")
                .arg("someone")
                .clone()],
        ),
        (
            "unknown format",
            vec![redis::cmd("HSET").arg(&meta).arg("outbox").arg("2").clone()],
        ),
        (
            "done beyond last",
            vec![redis::cmd("HSET")
                .arg(&meta)
                .arg("outbox")
                .arg("1")
                .arg("last")
                .arg("1")
                .arg("done")
                .arg("5")
                .arg("purged")
                .arg("0")
                .clone()],
        ),
        (
            "relay mark not a token",
            vec![redis::cmd("HSET")
                .arg(&meta)
                .arg("outbox")
                .arg("1")
                .arg("last")
                .arg("0")
                .arg("done")
                .arg("0")
                .arg("purged")
                .arg("0")
                .arg("relay")
                .arg("1e3")
                .clone()],
        ),
        (
            "entries is a string",
            vec![redis::cmd("SET").arg(&entries).arg("foreign").clone()],
        ),
    ];
    for (what, commands) in setups {
        fence
            .query(redis::cmd("DEL").arg(&meta).arg(&entries))
            .await
            .unwrap();
        for cmd in &commands {
            fence.query(cmd).await.unwrap();
        }
        let dump = |key: &str| redis::cmd("DUMP").arg(key).clone();
        let before = (
            fence.query(&dump(&meta)).await.unwrap(),
            fence.query(&dump(&entries)).await.unwrap(),
        );
        let error = outbox.transition(&script, &t).await.unwrap_err();
        println!("corrupt: {what} -> {error}");
        assert!(
            matches!(error, OutboxError::Fence(FenceError::CorruptState { .. })),
            "{what}: {error:?}"
        );
        let after = (
            fence.query(&dump(&meta)).await.unwrap(),
            fence.query(&dump(&entries)).await.unwrap(),
        );
        assert_eq!(before, after, "{what}: the foreign state is untouched");
        assert_eq!(
            fence.high_water_mark(&d).await.unwrap(),
            None,
            "{what}: the mark did not move"
        );
        assert!(
            outbox.entries(&d).await.is_err(),
            "{what}: listing refuses too"
        );
    }
}

#[tokio::test]
async fn a_corrupt_entry_stops_its_domain_without_losing_it() {
    let Some(fence) = support::standalone("corrupt-entry").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let (bad, good) = (domain("order-bad"), domain("order-good"));
    for d in [&bad, &good] {
        support::pay(&outbox, d, token(1), "pay", &server.url("/ok"), d.as_str())
            .await
            .unwrap();
    }
    let entries = fence.user_key(&bad, "ob:entries").unwrap();
    fence
        .query(redis::cmd("HSET").arg(&entries).arg("1:s").arg("?"))
        .await
        .unwrap();
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    wait_for(
        &outbox,
        std::slice::from_ref(&good),
        Duration::from_secs(10),
        |e| matches!(e[0].status, EntryStatus::Delivered { .. }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = handle.shutdown().await.unwrap();
    assert!(report.errors > 0, "{report:?}");
    assert_eq!(
        server.applied().len(),
        1,
        "the corrupt entry was not delivered"
    );
    // Repaired, it is delivered: nothing was lost or marked.
    fence
        .query(redis::cmd("HDEL").arg(&entries).arg("1:s"))
        .await
        .unwrap();
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    wait_for(
        &outbox,
        std::slice::from_ref(&bad),
        Duration::from_secs(10),
        |e| matches!(e[0].status, EntryStatus::Delivered { .. }),
    )
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(server.applied().len(), 2);
}

#[tokio::test]
async fn a_destination_the_sink_cannot_use_is_dead_lettered_at_once() {
    let Some(fence) = support::standalone("bad-destination").await else {
        return;
    };
    let outbox = outbox(&fence);
    let d = domain("order-bad");
    // `enqueue` accepts opaque destinations, which the webhook sink cannot reach.
    let t = RedisTransition::new(d.clone(), token(1), op("q")).effect(Effect::new(
        "enqueue",
        "orders-out",
        "x",
    ));
    outbox
        .transition(&OutboxScript::new("return 1"), &t)
        .await
        .unwrap();
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    let entries = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        |e| !matches!(e[0].status, EntryStatus::Pending { .. }),
    )
    .await;
    handle.shutdown().await.unwrap();
    match &entries[0].status {
        EntryStatus::DeadLettered {
            attempts: 1,
            last_error,
            ..
        } => {
            assert!(
                last_error.contains("orders-out") && last_error.contains("absolute URL"),
                "{last_error}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_backend_error_not_an_ambiguous_one() {
    let fence = RedisFence::builder()
        .url("redis://127.0.0.1:1")
        .build()
        .unwrap();
    let outbox = RedisOutbox::with_config(fence, OutboxConfig::new(support::kinds()));
    let error = outbox
        .transition(
            &OutboxScript::hset(),
            &with_effect(Effect::new("enqueue", "q", "x")),
        )
        .await
        .unwrap_err();
    println!("unreachable: {error}");
    assert!(
        matches!(error, OutboxError::Fence(FenceError::Backend { .. })),
        "{error:?}"
    );
}

#[tokio::test]
async fn relay_configuration_is_checked() {
    let Some(fence) = support::standalone("config").await else {
        return;
    };
    let outbox = outbox(&fence);
    let owner = OwnerId::new("r").unwrap();
    let bad = [
        RelayConfig::new("r", owner.clone()).retry(RetryPolicy::new(
            0,
            Duration::from_millis(1),
            Duration::from_millis(1),
        )),
        RelayConfig::new("r", owner.clone())
            .lease_ttl(Duration::from_secs(4))
            .delivery_timeout(Duration::from_secs(3)),
        RelayConfig::new("r", owner.clone()).lease_ttl(Duration::from_millis(1)),
        RelayConfig::new("", owner.clone()),
        RelayConfig::new("bad/name", owner),
    ];
    for config in bad {
        let error = support::relay_result(&outbox, webhook(), config.clone()).unwrap_err();
        println!("relay config: {error}");
        assert!(matches!(error, OutboxError::Configuration(_)), "{error:?}");
    }
}
