-- fence-mysql schema, version 1. `fence_db` is replaced by the database you choose.
-- Tokens are u64: BIGINT UNSIGNED holds every one exactly. Domains and op ids are bytes
-- (VARBINARY: compared byte for byte, no collation). Rows Fence would never write fail closed
-- when read. One statement per line group, separated by `;` at the end of a line.
CREATE DATABASE IF NOT EXISTS fence_db;

-- One row per domain: its high-water mark and its entry (value or tombstone).
CREATE TABLE IF NOT EXISTS fence_db.fence_marks (
    domain   VARBINARY(256) NOT NULL PRIMARY KEY,
    hwm      BIGINT UNSIGNED NULL,       -- NULL only inside the transaction that creates the row
    state    BINARY(1) NULL,             -- 'v' value, 't' tombstone, NULL: no entry (a claim alone)
    revision BIGINT UNSIGNED NULL,
    writer   BIGINT UNSIGNED NULL,       -- the token that wrote the entry
    value    LONGBLOB NULL
) ENGINE = InnoDB;

-- Operation ids of recent fenced operations, the newest `op_id_retention` per domain.
CREATE TABLE IF NOT EXISTS fence_db.fence_ops (
    seq      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    domain   VARBINARY(256) NOT NULL,
    token    BIGINT UNSIGNED NOT NULL,
    op_id    VARBINARY(128) NOT NULL,
    kind     VARBINARY(16) NOT NULL,     -- 'write' or 'transaction' (a fenced transaction)
    revision BIGINT UNSIGNED NULL,       -- the revision a write produced; NULL for a transaction
    previous BIGINT UNSIGNED NULL,       -- the mark before it
    UNIQUE KEY fence_ops_op (domain, token, op_id),
    KEY fence_ops_domain_seq (domain, seq)
) ENGINE = InnoDB;

-- Token counters of the issuer and the leases: one row per domain, never deleted by Fence.
-- Each issue is floored at the domain's mark, so a recreated row never issues a used token.
CREATE TABLE IF NOT EXISTS fence_db.fence_counters (
    domain   VARBINARY(256) NOT NULL PRIMARY KEY,
    last     BIGINT UNSIGNED NOT NULL    -- the last token issued (0: none yet)
) ENGINE = InnoDB;

-- Leases: the current owner, its token and its expiry by the server's clock, in UTC
-- (UTC_TIMESTAMP(6): no session time zone or daylight-saving change moves it).
CREATE TABLE IF NOT EXISTS fence_db.fence_leases (
    domain   VARBINARY(256) NOT NULL PRIMARY KEY,
    owner    VARBINARY(128) NOT NULL,
    token    BIGINT UNSIGNED NOT NULL,
    expires  DATETIME(6) NOT NULL
) ENGINE = InnoDB;

-- The database's own admission settings, one row (`one` = 1) that every client of the database
-- obeys, whatever it was built with (MySqlFence::set_resource_bounds). Created with none; a
-- missing row fails closed.
CREATE TABLE IF NOT EXISTS fence_db.fence_settings (
    one         TINYINT UNSIGNED NOT NULL PRIMARY KEY,  -- 1
    max_step    BIGINT UNSIGNED NULL,                    -- NULL: no step bound; never 0
    issued_only TINYINT UNSIGNED NOT NULL,               -- 1: only tokens the counter issued
    CONSTRAINT fence_settings_one CHECK (one = 1),
    CONSTRAINT fence_settings_step CHECK (max_step IS NULL OR max_step > 0)
) ENGINE = InnoDB;

INSERT IGNORE INTO fence_db.fence_settings (one, max_step, issued_only) VALUES (1, NULL, 0);

-- Re-bases: an operator lowered a domain's mark that was pushed to a token no one issued.
CREATE TABLE IF NOT EXISTS fence_db.fence_rebases (
    seq       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    domain    VARBINARY(256) NOT NULL,
    from_mark BIGINT UNSIGNED NOT NULL,
    to_mark   BIGINT UNSIGNED NOT NULL,
    operator  VARBINARY(128) NOT NULL,
    reason    BLOB NOT NULL,
    at        DATETIME(6) NOT NULL,                    -- UTC_TIMESTAMP(6)
    KEY fence_rebases_domain (domain, seq)
) ENGINE = InnoDB;
