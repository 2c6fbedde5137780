-- A donor device's contributions: one row per lease it returned a result
-- for. state: pending (returned, no signed receipt yet), confirmed (the
-- coordinator's signed receipt arrived and was checked), rejected (a
-- deviation, an unverified task, or a refusal). result keeps the bytes
-- until the coordinator acknowledged the submission.
CREATE TABLE contributions (
	lease      TEXT PRIMARY KEY,
	pool       TEXT NOT NULL,
	job        BLOB NOT NULL,
	task       INTEGER NOT NULL,
	digest     BLOB NOT NULL,
	failed     INTEGER NOT NULL DEFAULT 0,
	failure    TEXT NOT NULL DEFAULT '',
	cost       REAL NOT NULL DEFAULT 0,
	state      TEXT NOT NULL CHECK (state IN ('pending', 'confirmed', 'rejected')),
	reason     TEXT NOT NULL DEFAULT '',
	created    INTEGER NOT NULL, -- unix milliseconds
	day        TEXT NOT NULL,    -- YYYY-MM-DD, local time at creation
	acked      INTEGER NOT NULL DEFAULT 0,
	result     BLOB,
	receipt    INTEGER NOT NULL DEFAULT 0, -- ledger Seq of the confirming receipt
	entry      TEXT                        -- that receipt as JSON
) STRICT;
CREATE INDEX contributions_pool_acked ON contributions(pool, acked);
CREATE INDEX contributions_pool_day ON contributions(pool, day);

-- The last ledger Seq this device has read, per pool.
CREATE TABLE ledger_cursors (
	pool TEXT PRIMARY KEY,
	seq  INTEGER NOT NULL
) STRICT;
