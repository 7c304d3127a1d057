-- fence-postgres schema, version 1. `fence_schema` is replaced by the schema you choose.
-- Tokens are u64: numeric(20,0), compared exactly by the server (bigint stops at 2^63 - 1),
-- with a check that keeps them in 1 ..= 2^64 - 1. Rows that break it anyway fail closed.
CREATE SCHEMA IF NOT EXISTS fence_schema;

-- One row per domain: its high-water mark and its entry (value or tombstone).
CREATE TABLE IF NOT EXISTS fence_schema.fence_marks (
    domain   text PRIMARY KEY,
    hwm      numeric(20,0)           -- NULL only inside the transaction that creates the row
             CONSTRAINT fence_marks_hwm_u64 CHECK (hwm BETWEEN 1 AND 18446744073709551615),
    state    "char",                 -- 'v' value, 't' tombstone, NULL: no entry (a claim alone)
    revision bigint,
    writer   numeric(20,0)           -- the token that wrote the entry
             CONSTRAINT fence_marks_writer_u64 CHECK (writer BETWEEN 1 AND 18446744073709551615),
    value    bytea
);

-- Operation ids of recent fenced operations, the newest `op_id_retention` per domain.
CREATE TABLE IF NOT EXISTS fence_schema.fence_ops (
    seq      bigserial PRIMARY KEY,
    domain   text NOT NULL,
    token    numeric(20,0) NOT NULL
             CONSTRAINT fence_ops_token_u64 CHECK (token BETWEEN 1 AND 18446744073709551615),
    op_id    text NOT NULL,
    kind     text NOT NULL,          -- 'write' or 'transaction' (a fenced transaction)
    revision bigint,                 -- the revision a write produced; NULL for a transaction
    previous numeric(20,0)
             CONSTRAINT fence_ops_previous_u64 CHECK (previous BETWEEN 1 AND 18446744073709551615),
    UNIQUE (domain, token, op_id)
);

-- Token counters of the issuer and the leases: one row per domain, never deleted by Fence.
-- Each issue is floored at the domain's mark, so a recreated row never issues a used token.
CREATE TABLE IF NOT EXISTS fence_schema.fence_counters (
    domain   text PRIMARY KEY,
    last     numeric(20,0) NOT NULL  -- the last token issued (0: none yet)
             CONSTRAINT fence_counters_last_u64 CHECK (last BETWEEN 0 AND 18446744073709551615)
);

-- Leases: the current owner, its token and its expiry by the server's clock.
CREATE TABLE IF NOT EXISTS fence_schema.fence_leases (
    domain   text PRIMARY KEY,
    owner    text NOT NULL,
    token    numeric(20,0) NOT NULL
             CONSTRAINT fence_leases_token_u64 CHECK (token BETWEEN 1 AND 18446744073709551615),
    expires  timestamptz NOT NULL
);
