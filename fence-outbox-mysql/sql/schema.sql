-- fence-outbox-mysql schema, version 1. `fence_db` is replaced by the fence's database (run
-- fence-mysql's schema first). Tokens and seqs are BIGINT UNSIGNED; domains, op ids and keys
-- are bytes (VARBINARY: compared byte for byte, no collation), as in fence-mysql's tables.

-- One row per domain with an outbox: entry numbering, the relay's progress and its fence.
CREATE TABLE IF NOT EXISTS fence_db.fence_outbox_domains (
    domain    VARBINARY(256) NOT NULL PRIMARY KEY,
    part      SMALLINT UNSIGNED NOT NULL,  -- the relay partition (OutboxConfig::partition_of)
    last_seq  BIGINT UNSIGNED NOT NULL,    -- seq of the last recorded entry
    done_seq  BIGINT UNSIGNED NOT NULL,    -- seq of the last settled entry (delivered or dead)
    relay     BIGINT UNSIGNED NULL,        -- the newest relay token that touched the domain
    version   BIGINT UNSIGNED NOT NULL,    -- bumps with every transition
    KEY fence_outbox_domains_part (part, domain)
) ENGINE = InnoDB;

-- The effects, in order per domain; delivered ones are kept for the retention window.
CREATE TABLE IF NOT EXISTS fence_db.fence_outbox_entries (
    domain      VARBINARY(256) NOT NULL,
    seq         BIGINT UNSIGNED NOT NULL,
    idem_key    VARBINARY(2048) NOT NULL,  -- the idempotency key sent with the effect
    op_id       VARBINARY(128) NOT NULL,
    kind        VARBINARY(64) NOT NULL,    -- MAX_KIND_BYTES
    destination VARBINARY(2048) NOT NULL,  -- MAX_DESTINATION_BYTES
    payload     LONGBLOB NOT NULL,
    token       BIGINT UNSIGNED NOT NULL,
    recorded_at DATETIME(6) NOT NULL,      -- UTC_TIMESTAMP(6)
    status      BINARY(1) NOT NULL,        -- 'p' pending, 'd' delivered, 'x' dead letter
    attempts    INT UNSIGNED NOT NULL,
    last_error  BLOB NULL,
    settled_at  DATETIME(6) NULL,
    settled_by  BIGINT UNSIGNED NULL,      -- the relay token that settled it
    PRIMARY KEY (domain, seq),
    UNIQUE KEY fence_outbox_entries_key (idem_key),
    KEY fence_outbox_entries_op (domain, token, op_id)
) ENGINE = InnoDB;
