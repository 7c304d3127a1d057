#![allow(clippy::panic)]
//! Every model at the profile's bounds (`FENCE_MODEL_PROFILE`, `ci` unless set): the protocol
//! as Fence runs it satisfies every property, exhaustively, and each broken variant is refuted
//! with a counterexample.

use fence_model::kafka_claim::{self, KafkaClaim, Variant};
use fence_model::lease_guard::{self, LeaseGuardModel};
use fence_model::outbox_relay::{self, OutboxRelay};
use fence_model::replica_ack::{self, Promotion, ReplicaAck};
use fence_model::{check, refute, refute_shortening, Profile, Report};

fn profile() -> Profile {
    Profile::from_env().unwrap_or_else(|e| panic!("{e}"))
}

fn holds(name: String, outcome: Result<Report, Report>) {
    match outcome {
        Ok(report) => println!("holds: {report}"),
        Err(report) => panic!("{name} does not hold: {report}"),
    }
}

fn refuted(name: String, outcome: Result<Report, Report>) {
    match outcome {
        Ok(report) => println!("refuted as it must be: {report}"),
        Err(report) => panic!("the broken variant {name} was not refuted: {report}"),
    }
}

#[test]
fn the_kafka_claim_holds() {
    let model = KafkaClaim::new(profile(), Variant::Fence);
    let name = model.to_string();
    holds(name.clone(), check(name, model));
}

#[test]
fn deciding_before_init_transactions_is_refuted() {
    let model = KafkaClaim::new(profile(), Variant::DecideBeforeInit);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, kafka_claim::MARK_NEVER_DECREASES),
    );
}

#[test]
fn check_then_write_shows_a_stale_record() {
    let model = KafkaClaim::new(profile(), Variant::DecideBeforeInit);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, kafka_claim::NO_STALE_RECORD_VISIBLE),
    );
}

#[test]
fn readers_wait_forever_without_the_transaction_timeout() {
    let model = KafkaClaim {
        timeouts: 0,
        abandoned_transactions_expire: false,
        ..KafkaClaim::new(profile(), Variant::Fence)
    };
    let name = format!("{model} (abandoned transactions never expire)");
    refuted(
        name.clone(),
        refute(name, model, kafka_claim::NOBODY_WAITS_FOREVER),
    );
}

#[test]
fn producer_epochs_alone_are_refuted() {
    let model = KafkaClaim::new(profile(), Variant::EpochsOnly);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, kafka_claim::HIGHEST_HOLDER_OWNS),
    );
}

#[test]
fn replica_acknowledgement_holds() {
    let model = ReplicaAck::new(profile(), 1, Promotion::MostUpToDate);
    let name = model.to_string();
    holds(name.clone(), check(name, model));
}

#[test]
fn acknowledging_without_wait_is_refuted() {
    let model = ReplicaAck::new(profile(), 0, Promotion::MostUpToDate);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, replica_ack::ACKNOWLEDGED_MARK_SURVIVES),
    );
}

#[test]
fn promoting_a_lagging_replica_is_refuted() {
    let model = ReplicaAck::new(profile(), 1, Promotion::Any);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, replica_ack::ACKNOWLEDGED_MARK_SURVIVES),
    );
}

#[test]
fn the_lease_guard_holds() {
    let model = LeaseGuardModel::new(profile(), lease_guard::Variant::Fence);
    let name = model.to_string();
    holds(name.clone(), check(name, model));
}

#[test]
fn counting_the_whole_ttl_is_refuted() {
    let model = LeaseGuardModel::new(profile(), lease_guard::Variant::WholeTtl);
    let name = model.to_string();
    refuted(
        name.clone(),
        // Its counterexamples are a TTL of clock ticks long: no search for a shorter one.
        refute_shortening(name, model, lease_guard::NEVER_HELD_AFTER_THE_GRANT, 0),
    );
}

#[test]
fn the_outbox_relay_holds() {
    let model = OutboxRelay::new(profile(), outbox_relay::Variant::Fence);
    let name = model.to_string();
    holds(name.clone(), check(name, model));
}

#[test]
fn marking_before_delivery_is_refuted() {
    let model = OutboxRelay::new(profile(), outbox_relay::Variant::MarkBeforeDelivery);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, outbox_relay::EVERY_EFFECT_SETTLED),
    );
}

#[test]
fn unfenced_relay_marks_are_refuted() {
    let model = OutboxRelay::new(profile(), outbox_relay::Variant::Unfenced);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(
            name,
            model,
            outbox_relay::A_SUPERSEDED_RELAY_SENDS_AT_MOST_ONE,
        ),
    );
}

#[test]
fn recording_after_the_check_is_refuted() {
    let model = OutboxRelay::new(profile(), outbox_relay::Variant::CheckThenRecord);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, outbox_relay::NO_STALE_EFFECT_RECORDED),
    );
}

#[test]
fn marking_before_delivery_breaks_the_order() {
    let model = OutboxRelay::new(profile(), outbox_relay::Variant::MarkBeforeDelivery);
    let name = model.to_string();
    refuted(name.clone(), refute(name, model, outbox_relay::IN_ORDER));
}

#[test]
fn judging_the_attempt_count_as_read_is_refuted() {
    let model = OutboxRelay::new(profile(), outbox_relay::Variant::CountAsRead);
    let name = model.to_string();
    refuted(
        name.clone(),
        refute(name, model, outbox_relay::ATTEMPTS_BOUNDED),
    );
}
