-- fence-postgres schema, version 1. `fence_schema` is replaced by the schema you choose.
-- Tokens are u64: numeric(20,0), compared exactly by the server; bigint stops at 2^63 - 1.
CREATE SCHEMA IF NOT EXISTS fence_schema;

-- One row per domain: its high-water mark and its entry (value or tombstone).
CREATE TABLE IF NOT EXISTS fence_schema.fence_marks (
    domain   text PRIMARY KEY,
    hwm      numeric(20,0),          -- NULL only inside the transaction that creates the row
    state    "char",                 -- 'v' value, 't' tombstone, NULL: no entry (a claim alone)
    revision bigint,
    writer   numeric(20,0),          -- the token that wrote the entry
    value    bytea
);

-- Operation ids of recent fenced operations, the newest `op_id_retention` per domain.
CREATE TABLE IF NOT EXISTS fence_schema.fence_ops (
    seq      bigserial PRIMARY KEY,
    domain   text NOT NULL,
    token    numeric(20,0) NOT NULL,
    op_id    text NOT NULL,
    kind     text NOT NULL,          -- 'write' or 'transaction' (a fenced transaction)
    revision bigint,                 -- the revision a write produced; NULL for a transaction
    previous numeric(20,0),
    UNIQUE (domain, token, op_id)
);

-- Token counters of the issuer and the leases: one row per domain, never deleted by Fence.
-- Each issue is floored at the domain's mark, so a recreated row never issues a used token.
CREATE TABLE IF NOT EXISTS fence_schema.fence_counters (
    domain   text PRIMARY KEY,
    last     numeric(20,0) NOT NULL  -- the last token issued
);

-- Leases: the current owner, its token and its expiry by the server's clock.
CREATE TABLE IF NOT EXISTS fence_schema.fence_leases (
    domain   text PRIMARY KEY,
    owner    text NOT NULL,
    token    numeric(20,0) NOT NULL,
    expires  timestamptz NOT NULL
);
