-- fence-outbox-postgres schema, version 1. `fence_schema` is replaced by the fence's schema
-- (run fence-postgres's schema first).

-- One row per domain with an outbox: entry numbering, the relay's progress and its fence.
CREATE TABLE IF NOT EXISTS fence_schema.fence_outbox_domains (
    domain    text PRIMARY KEY,
    partition integer NOT NULL,      -- the relay partition (OutboxConfig::partition_of)
    last      bigint NOT NULL,       -- seq of the last recorded entry
    done      bigint NOT NULL,       -- seq of the last settled entry (delivered or dead)
    relay     numeric(20,0),         -- the newest relay token that touched the domain
    version   bigint NOT NULL        -- bumps with every transition
);
CREATE INDEX IF NOT EXISTS fence_outbox_domains_with_work
    ON fence_schema.fence_outbox_domains (partition) WHERE done < last;

-- The effects, in order per domain; delivered ones are kept for the retention window.
CREATE TABLE IF NOT EXISTS fence_schema.fence_outbox_entries (
    domain      text NOT NULL,
    seq         bigint NOT NULL,
    key         text NOT NULL UNIQUE, -- the idempotency key sent with the effect
    op_id       text NOT NULL,
    kind        text NOT NULL,
    destination text NOT NULL,
    payload     bytea NOT NULL,
    token       numeric(20,0) NOT NULL,
    recorded_at timestamptz NOT NULL,
    status      "char" NOT NULL,      -- 'p' pending, 'd' delivered, 'x' dead letter
    attempts    integer NOT NULL,
    last_error  text,
    settled_at  timestamptz,
    settled_by  numeric(20,0),        -- the relay token that settled it
    PRIMARY KEY (domain, seq)
);
