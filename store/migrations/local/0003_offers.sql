-- The donor's choices about pools and jobs (offers.Preferences). pool is
-- the pool's URL as the donor gave it; '' stands for every pool.
--
-- offer_pools: the pools this machine knows (joined, browsed or named in a
-- choice), with their relative weight (default 1; 0 offers a pool
-- nothing), the GPU-program opt-in and per-task ceilings. The row with
-- url '' holds the global settings and is not a known pool.
CREATE TABLE offer_pools (
	url              TEXT PRIMARY KEY,
	name             TEXT NOT NULL DEFAULT '',
	weight           REAL NOT NULL DEFAULT 1 CHECK (weight >= 0),
	gpu_programs     INTEGER NOT NULL DEFAULT 0,
	max_memory_mib   INTEGER NOT NULL DEFAULT 0 CHECK (max_memory_mib >= 0),
	max_task_time_ms INTEGER NOT NULL DEFAULT 0 CHECK (max_task_time_ms >= 0),
	added            INTEGER NOT NULL -- unix milliseconds
) STRICT;

-- offer_choices: one row per job or owner the donor accepted or refused,
-- per pool ('' for every pool). A later choice about the same subject
-- replaces the earlier one. subject is a job ID (64 hex digits) or an
-- owner ID.
CREATE TABLE offer_choices (
	pool    TEXT NOT NULL,
	kind    TEXT NOT NULL CHECK (kind IN ('job', 'owner')),
	subject TEXT NOT NULL,
	choice  TEXT NOT NULL CHECK (choice IN ('accept', 'refuse')),
	updated INTEGER NOT NULL, -- unix milliseconds
	PRIMARY KEY (pool, kind, subject)
) STRICT;
