-- fence-postgres schema, version 4 (FORMATS.md §6). `fence_schema` is replaced by the schema you choose.
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

-- Operators' re-bases of a domain's mark (`PostgresFence::rebase`): who, when and why.
CREATE TABLE IF NOT EXISTS fence_schema.fence_rebases (
    seq       bigserial PRIMARY KEY,
    domain    text NOT NULL,
    from_mark numeric(20,0) NOT NULL,
    to_mark   numeric(20,0) NOT NULL,
    operator  text NOT NULL,
    reason    text NOT NULL,
    at        timestamptz NOT NULL DEFAULT now()
);

-- Admission settings every client of the schema obeys, whatever it was built with
-- (`PostgresFence::set_resource_bounds`): at most one row; none means no setting. Each write,
-- claim and fenced transaction combines them with the client's own, the tighter of each.
CREATE TABLE IF NOT EXISTS fence_schema.fence_settings (
    one         boolean PRIMARY KEY DEFAULT true CONSTRAINT fence_settings_one CHECK (one),
    max_step    numeric(20,0)    -- refuse tokens more than this above the mark (NULL: no bound)
                CONSTRAINT fence_settings_max_step_u64 CHECK (max_step BETWEEN 1 AND 18446744073709551615),
    issued_only boolean NOT NULL DEFAULT false  -- accept only tokens fence_counters issued
);

-- Finding a domain's recent op ids and pruning them: by domain, in order.
CREATE INDEX IF NOT EXISTS fence_ops_domain_seq ON fence_schema.fence_ops (domain, seq);

-- A store write decided in one statement, in the order of fence-core's pipeline (the mark row
-- locked; anything not Fence's, a remembered op id, a stale token, a token the domain's counter
-- never issued (when issued-only) or more than the step bound above the mark, or a failed
-- revision condition changes nothing; else the write and its op id). The bounds are the
-- tighter of the client's (p_max_step, p_issued_only) and fence_settings'. Returns the mark
-- row as it was, the remembered operation, the counter's last token, the bounds applied and
-- whether it applied: the client derives the outcome from them with fence-core's own decision,
-- and reports any disagreement. Arguments are checked: the function refuses what the client
-- would never send. (Version 1 had no p_max_step, p_issued_only nor `issued`, version 2 no
-- bound_step nor bound_issued_only: migrating replaces it.)
DROP FUNCTION IF EXISTS fence_schema.fence_write(
    text, numeric, boolean, text, text, bigint, "char", bytea, bigint);
DO $drop$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'fence_schema' AND p.proname = 'fence_write'
                  AND p.pronargs = 11
                  AND NOT COALESCE('bound_step' = ANY (p.proargnames), false)) THEN
        DROP FUNCTION fence_schema.fence_write(
            text, numeric, boolean, text, text, bigint, "char", bytea, bigint, numeric, boolean);
    END IF;
END $drop$;
CREATE OR REPLACE FUNCTION fence_schema.fence_write(
    p_domain text, p_token numeric, p_strict boolean, p_op_id text, p_condition text,
    p_expected bigint, p_state "char", p_value bytea, p_retention bigint,
    p_max_step numeric, p_issued_only boolean)
RETURNS TABLE (hwm text, state "char", revision bigint, writer text, created boolean,
               op_kind text, op_revision bigint, op_previous text, applied boolean,
               issued text, bound_step text, bound_issued_only boolean)
LANGUAGE plpgsql AS $fence$
DECLARE
    m fence_schema.fence_marks%ROWTYPE;
    o fence_schema.fence_ops%ROWTYPE;
    last_issued numeric;
    v_step numeric;
    v_issued_only boolean;
    fresh boolean := false;
    refused boolean;
    u64 CONSTANT numeric := 18446744073709551615;
BEGIN
    IF p_domain IS NULL OR p_token IS NULL OR p_token < 1 OR p_token > u64
       OR p_token <> trunc(p_token) OR p_strict IS NULL OR p_retention IS NULL
       OR p_state IS NULL OR p_state NOT IN ('v', 't') OR (p_state = 'v') <> (p_value IS NOT NULL)
       OR p_condition IS NULL OR p_condition NOT IN ('any', 'absent', 'revision')
       OR (p_condition = 'revision') <> (p_expected IS NOT NULL)
       OR p_issued_only IS NULL OR (p_max_step IS NOT NULL AND p_max_step < 1) THEN
        RAISE EXCEPTION 'fence_write: invalid arguments' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO m FROM fence_schema.fence_marks AS k WHERE k.domain = p_domain FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fence_schema.fence_marks AS k (domain) VALUES (p_domain)
            ON CONFLICT (domain) DO NOTHING;
        fresh := FOUND;
        SELECT * INTO m FROM fence_schema.fence_marks AS k WHERE k.domain = p_domain FOR UPDATE;
    END IF;
    -- After the lock, in its own statement, like everything below: what committed meanwhile
    -- is seen. LEAST ignores a NULL (no bound).
    SELECT LEAST(p_max_step, s.max_step), p_issued_only OR s.issued_only
      INTO v_step, v_issued_only FROM fence_schema.fence_settings AS s WHERE s.one;
    IF NOT FOUND THEN
        v_step := p_max_step;
        v_issued_only := p_issued_only;
    END IF;
    IF p_op_id IS NOT NULL THEN
        SELECT * INTO o FROM fence_schema.fence_ops AS r
         WHERE r.domain = p_domain AND r.token = p_token AND r.op_id = p_op_id;
    END IF;
    IF v_issued_only THEN
        -- Tokens are returned by the issuer only once committed: every one is visible here.
        SELECT c.last INTO last_issued FROM fence_schema.fence_counters AS c
         WHERE c.domain = p_domain;
    END IF;
    issued := last_issued::text; bound_step := v_step::text; bound_issued_only := v_issued_only;
    hwm := m.hwm::text; state := m.state; revision := m.revision; writer := m.writer::text;
    created := fresh; op_kind := o.kind; op_revision := o.revision;
    op_previous := o.previous::text; applied := false;
    refused := (m.hwm IS NULL AND NOT fresh)
       OR (m.hwm IS NOT NULL AND (m.hwm < 1 OR m.hwm > u64 OR m.hwm <> trunc(m.hwm)))
       OR NOT ((m.state IS NULL AND m.revision IS NULL AND m.writer IS NULL)
               OR (m.state IS NOT NULL AND m.state IN ('v', 't')
                   AND m.revision IS NOT NULL AND m.revision >= 1
                   AND m.writer IS NOT NULL AND m.hwm IS NOT NULL
                   AND m.writer >= 1 AND m.writer <= m.hwm))
       OR o.kind IS NOT NULL
       OR (m.hwm IS NOT NULL AND (p_token < m.hwm OR (p_strict AND p_token = m.hwm)))
       OR (v_issued_only AND (last_issued IS NULL OR p_token > last_issued))
       OR (v_step IS NOT NULL AND p_token - COALESCE(m.hwm, 0) > v_step)
       OR (p_condition = 'absent' AND m.state IS NOT DISTINCT FROM 'v')
       OR (p_condition = 'revision' AND m.revision IS DISTINCT FROM p_expected);
    -- Unknown (NULL) counts as refused: fail closed.
    IF refused IS NOT FALSE THEN
        IF fresh THEN
            -- The row this call created must not outlive the refusal (a NULL mark).
            DELETE FROM fence_schema.fence_marks AS k WHERE k.domain = p_domain;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE fence_schema.fence_marks AS k SET hwm = p_token, state = p_state,
           revision = COALESCE(m.revision, 0) + 1, writer = p_token, value = p_value
     WHERE k.domain = p_domain;
    IF p_op_id IS NOT NULL AND p_retention > 0 THEN
        INSERT INTO fence_schema.fence_ops AS r (domain, token, op_id, kind, revision, previous)
        VALUES (p_domain, p_token, p_op_id, 'write', COALESCE(m.revision, 0) + 1, m.hwm);
        DELETE FROM fence_schema.fence_ops AS r WHERE r.domain = p_domain AND r.seq <=
            (SELECT q.seq FROM fence_schema.fence_ops AS q WHERE q.domain = p_domain
              ORDER BY q.seq DESC OFFSET p_retention LIMIT 1);
    END IF;
    applied := true;
    RETURN NEXT;
END
$fence$;

-- A fenced transaction's (and a claim's) lock: the domain's mark row locked `FOR UPDATE`
-- (created if missing: `created`; the caller's rollback removes it again), then, in statements
-- of their own so that what committed while the lock was awaited is seen, the record of
-- (p_token, p_op_id), the schema's settings and, when p_counter asks for it (the client's
-- issued-only setting, a re-base) or the settings' issued-only is on, the domain's counter. Returns the row as locked; the client
-- decides with fence-core. One call after `BEGIN`: one round trip, its plans cached by the
-- session. (New in version 4.)
-- (The first development build of version 4 had a fence_lock without `txid` and a fence_raise
-- without p_txid: migrating replaces them.)
DROP FUNCTION IF EXISTS fence_schema.fence_raise(text, numeric, numeric, numeric, text, numeric, bigint);
DO $drop$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'fence_schema' AND p.proname = 'fence_lock'
                  AND NOT COALESCE('txid' = ANY (p.proargnames), false)) THEN
        DROP FUNCTION fence_schema.fence_lock(text, numeric, text, boolean);
    END IF;
END $drop$;
CREATE OR REPLACE FUNCTION fence_schema.fence_lock(
    p_domain text, p_token numeric, p_op_id text, p_counter boolean)
RETURNS TABLE (hwm text, state "char", revision bigint, writer text, created boolean,
               op_kind text, op_revision bigint, op_previous text, issued text,
               step text, issued_only boolean, txid bigint)
LANGUAGE plpgsql AS $fence$
DECLARE
    m fence_schema.fence_marks%ROWTYPE;
    o fence_schema.fence_ops%ROWTYPE;
BEGIN
    IF p_domain IS NULL OR p_counter IS NULL THEN
        RAISE EXCEPTION 'fence_lock: invalid arguments' USING ERRCODE = '22023';
    END IF;
    created := false;
    SELECT * INTO m FROM fence_schema.fence_marks AS k WHERE k.domain = p_domain FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fence_schema.fence_marks AS k (domain) VALUES (p_domain)
            ON CONFLICT (domain) DO NOTHING;
        created := FOUND;
        SELECT * INTO m FROM fence_schema.fence_marks AS k WHERE k.domain = p_domain FOR UPDATE;
    END IF;
    IF p_op_id IS NOT NULL THEN
        SELECT * INTO o FROM fence_schema.fence_ops AS r
         WHERE r.domain = p_domain AND r.token = p_token AND r.op_id = p_op_id;
    END IF;
    SELECT s.max_step::text, s.issued_only INTO step, issued_only
      FROM fence_schema.fence_settings AS s WHERE s.one;
    issued_only := COALESCE(issued_only, false);
    IF p_counter OR issued_only THEN
        -- Tokens are returned by the issuer only once committed: every one is visible here.
        SELECT c.last::text INTO issued FROM fence_schema.fence_counters AS c
         WHERE c.domain = p_domain;
    END IF;
    hwm := m.hwm::text; state := m.state; revision := m.revision; writer := m.writer::text;
    op_kind := o.kind; op_revision := o.revision; op_previous := o.previous::text;
    -- The row lock gave the transaction its id: fence_raise checks it is still this one.
    txid := txid_current();
    RETURN NEXT;
END
$fence$;

-- A fenced transaction's change to the row fence_lock locked, sent with its `COMMIT` in one
-- message: first a check that this is still the transaction fence_lock ran in (p_txid: a
-- `COMMIT` or `ROLLBACK` sent inside it ended it, and this statement would run in a new one),
-- then the mark raised from p_from (what the lock read) to p_to (NULL: kept), and the op id
-- remembered (pruned to the newest p_retention). Either check failing raises ZF001, so the
-- `COMMIT` after it never runs. Any statement fails in an aborted transaction, whose `COMMIT`
-- would answer `ROLLBACK` without an error. (New in version 4.)
CREATE OR REPLACE FUNCTION fence_schema.fence_raise(
    p_domain text, p_txid bigint, p_from numeric, p_to numeric, p_op_token numeric,
    p_op_id text, p_previous numeric, p_retention bigint)
RETURNS void
LANGUAGE plpgsql AS $fence$
BEGIN
    IF p_domain IS NULL OR p_txid IS NULL OR p_retention IS NULL
       OR (p_op_id IS NOT NULL AND p_op_token IS NULL) THEN
        RAISE EXCEPTION 'fence_raise: invalid arguments' USING ERRCODE = '22023';
    END IF;
    IF txid_current_if_assigned() IS DISTINCT FROM p_txid THEN
        RAISE EXCEPTION 'fence_raise: the transaction that locked the mark row of % has ended',
            p_domain USING ERRCODE = 'ZF001';
    END IF;
    IF p_to IS NOT NULL THEN
        UPDATE fence_schema.fence_marks AS k SET hwm = p_to
         WHERE k.domain = p_domain AND k.hwm IS NOT DISTINCT FROM p_from;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'fence_raise: the mark row of % changed under the transaction',
                p_domain USING ERRCODE = 'ZF001';
        END IF;
    END IF;
    IF p_op_id IS NOT NULL AND p_retention > 0 THEN
        INSERT INTO fence_schema.fence_ops AS r (domain, token, op_id, kind, revision, previous)
        VALUES (p_domain, p_op_token, p_op_id, 'transaction', NULL, p_previous);
        DELETE FROM fence_schema.fence_ops AS r WHERE r.domain = p_domain AND r.seq <=
            (SELECT q.seq FROM fence_schema.fence_ops AS q WHERE q.domain = p_domain
              ORDER BY q.seq DESC OFFSET p_retention LIMIT 1);
    END IF;
END
$fence$;
