-- A coordinator's pool state (see pool.Store). The scheduling rules live in
-- package pool; these tables only hold its records.

CREATE TABLE peers (
	id          TEXT PRIMARY KEY,
	owner       TEXT NOT NULL,
	key         BLOB NOT NULL,
	owner_key   BLOB NOT NULL,
	endorsement BLOB NOT NULL,
	name        TEXT NOT NULL DEFAULT '',
	joined      INTEGER NOT NULL -- unix milliseconds
) STRICT;

CREATE TABLE jobs (
	id        BLOB PRIMARY KEY,
	canonical BLOB NOT NULL,
	owner     TEXT NOT NULL,
	merger    TEXT NOT NULL,
	ord       INTEGER NOT NULL UNIQUE,
	added     INTEGER NOT NULL, -- unix milliseconds
	acked     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- One row per lease ever granted; result holds the submitted bytes only
-- while the task is undecided. version is compare-and-set.
CREATE TABLE replicas (
	lease    TEXT PRIMARY KEY,
	job      BLOB NOT NULL REFERENCES jobs(id),
	task     INTEGER NOT NULL,
	peer     TEXT NOT NULL,
	owner    TEXT NOT NULL,
	state    TEXT NOT NULL,
	created  INTEGER NOT NULL, -- unix milliseconds
	deadline INTEGER NOT NULL, -- unix milliseconds
	digest   BLOB NOT NULL,
	failed   INTEGER NOT NULL DEFAULT 0,
	reason   TEXT NOT NULL DEFAULT '',
	result   BLOB,
	version  INTEGER NOT NULL
) STRICT;
CREATE INDEX replicas_job_task ON replicas(job, task);

-- One row per decided task; result only until the merger acknowledged it.
CREATE TABLE outcomes (
	job    BLOB NOT NULL REFERENCES jobs(id),
	seq    INTEGER NOT NULL,
	task   INTEGER NOT NULL,
	status TEXT NOT NULL,
	digest BLOB NOT NULL,
	reason TEXT NOT NULL DEFAULT '',
	result BLOB,
	PRIMARY KEY (job, seq),
	UNIQUE (job, task)
) STRICT;

-- The signed, hash-chained ledger. hash is SHA-256 of the entry's
-- canonical encoding with its signature (pool.Entry.Hash).
CREATE TABLE ledger (
	seq    INTEGER PRIMARY KEY,
	prev   BLOB NOT NULL,
	hash   BLOB NOT NULL,
	kind   TEXT NOT NULL,
	pool   TEXT NOT NULL,
	job    BLOB NOT NULL,
	task   INTEGER NOT NULL,
	peer   TEXT NOT NULL,
	owner  TEXT NOT NULL,
	lease  TEXT NOT NULL,
	digest BLOB NOT NULL,
	cost   REAL NOT NULL,
	time   INTEGER NOT NULL,
	reason TEXT NOT NULL DEFAULT '',
	sig    BLOB NOT NULL
) STRICT;
CREATE INDEX ledger_peer ON ledger(peer, seq);
