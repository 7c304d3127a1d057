//! The read-back of a refused commit ([`crate::client::committed_at`]) on the real broker, in
//! the case it exists for: a holder's records acknowledged, another producer of its
//! transactional id initialised before its commit (a zombie's re-initialisation, a lost
//! answer's window), the commit refused. The mock cluster keeps no transactions, so only a
//! real broker can show the aborted side.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer};

use crate::client::{committed_at, transactional_producer, Clients};
use crate::context::KafkaContext;
use crate::error::{classify, TxnFailure};

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_commit_reads_back_as_aborted_and_a_commit_as_committed() {
    let Some((config, topic)) = fence_testkit::kafka::fresh_topic("read-back", 1).await else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        let clients = Clients::new(config, KafkaContext::default());
        let id = format!("{topic}-holder");
        let holder = transactional_producer(&clients, &id, TIMEOUT).unwrap();
        holder.context().start_acks();
        holder.begin_transaction().unwrap();
        for value in ["a", "b"] {
            holder
                .send(BaseRecord::<[u8], [u8]>::to(&topic).payload(value.as_bytes()))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        holder.flush(TIMEOUT).unwrap();
        // Another producer of the id: the holder's open transaction is aborted.
        let successor = transactional_producer(&clients, &id, TIMEOUT).unwrap();
        let refused = holder
            .commit_transaction(TIMEOUT)
            .expect_err("the commit is refused");
        assert!(
            matches!(classify(refused, true), TxnFailure::Fenced(_)),
            "a commit after another producer's initialisation is fenced"
        );
        let acks = holder.context().acks();
        assert!(acks.delivered_all(2), "both records acknowledged: {acks:?}");
        for acked in &acks.acked {
            assert!(
                !committed_at(&clients, acked, TIMEOUT).unwrap(),
                "the aborted record at {acked:?} reads back as committed"
            );
        }

        successor.context().start_acks();
        successor.begin_transaction().unwrap();
        successor
            .send(BaseRecord::<[u8], [u8]>::to(&topic).payload(&b"c"[..]))
            .map_err(|(e, _)| e)
            .unwrap();
        successor.commit_transaction(TIMEOUT).unwrap();
        let acks = successor.context().acks();
        assert_eq!(acks.acked.len(), 1, "{acks:?}");
        assert!(
            committed_at(&clients, &acks.acked[0], TIMEOUT).unwrap(),
            "the committed record reads back as aborted"
        );
    })
    .await
    .unwrap();
}
