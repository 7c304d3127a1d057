//! A read that meets a lost connection goes on once librdkafka reconnects.
//!
//! Found in CI: a fresh reader on a loaded machine reported `AllBrokersDown` (a report that
//! librdkafka is reconnecting, not an answer from the broker), and the read failed with it
//! although the broker was up.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fence_core::FencedLog;
use fence_testkit::kafka::ProxiedFence;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_goes_on_across_a_lost_connection() {
    let Some(ProxiedFence {
        server: _server,
        proxy,
        fence,
        domain,
    }) = ProxiedFence::start("reconnect").await
    else {
        return;
    };
    assert_eq!(fence.read_log(&domain).await.unwrap().len(), 1);

    // The fence's own clients stay connected; the read's fresh reader cannot connect for a
    // second, and librdkafka reports that while it reconnects.
    proxy.refuse_new_connections(true);
    let restore = proxy.clone();
    let restorer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        restore.refuse_new_connections(false);
    });
    let log = fence.read_log(&domain).await;
    restorer.join().unwrap();
    assert!(
        proxy.refused_connections() > 0,
        "the read's reader never tried to connect while connections were refused: the test proves nothing"
    );
    let log = log.expect("the read goes on once the connection is back");
    let values: Vec<&[u8]> = log.iter().map(|e| &e.record.value[..]).collect();
    assert_eq!(values, vec![&b"first"[..]]);
}
