-- What a replica's device counted of the work its task took
-- (pool.ReplicaRecord.Work): work instructions by the worker's metering
-- rule work_rule; 0 and 0 for a replica that sent no count. An outcome's
-- and a ledger entry's work is the count its receipts credited
-- (pool.Verified.Work, pool.Entry.Work), 0 when none. Counts are at most
-- 2^63-1 (pool.MaxWorkCount).
ALTER TABLE replicas ADD COLUMN work_rule INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN work INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outcomes ADD COLUMN work INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ledger ADD COLUMN work INTEGER NOT NULL DEFAULT 0;
