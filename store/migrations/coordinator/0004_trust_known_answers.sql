-- Devices' and owners' trust records (pool.TrustRecord): consecutive
-- agreed results per program, deviations and exclusions of a device; an
-- owner's standing and exclusion. record is the scheduler's JSON,
-- version counts its changes (updates compare-and-set on it).
CREATE TABLE trust (
	kind    TEXT NOT NULL, -- "device" or "owner"
	id      TEXT NOT NULL,
	record  BLOB NOT NULL,
	version INTEGER NOT NULL,
	PRIMARY KEY (kind, id)
) STRICT;

-- The digest of a job's known-answers file (job.Verify.KnownAnswers),
-- kept beside the job and never served to peers; NULL when it has none.
ALTER TABLE jobs ADD COLUMN known_answers BLOB;
