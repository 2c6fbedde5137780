-- What this device fetched of each job's files, by path, in bytes: from
-- peers over direct connections, through a relay, and from the pool's
-- coordinator (pool.Transfer), summed over every fetch, for the history.
ALTER TABLE job_notes ADD COLUMN direct INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_notes ADD COLUMN relayed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_notes ADD COLUMN coordinator INTEGER NOT NULL DEFAULT 0;
