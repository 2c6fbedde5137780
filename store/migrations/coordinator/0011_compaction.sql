-- What DB.Compact keeps so that a restart reads the work in play rather
-- than the pool's whole history (store/compact.go). Rows of replicas and
-- outcomes stay where they are (Replica by lease, the one-outcome-per-task
-- check); these tables only say which of them Load may leave out.

-- A job's acknowledged outcomes 1 to upto, folded: how many were
-- accepted and failed, and their tasks as ranges (outcome_ranges). Load
-- hands them over as a pool.OutcomeSummary and reads only the outcomes
-- after upto.
CREATE TABLE outcome_summaries (
	job      BLOB PRIMARY KEY REFERENCES jobs(id),
	upto     INTEGER NOT NULL,
	accepted INTEGER NOT NULL,
	failed   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The tasks task_from to task_to - 1 of a job's summary, disjoint and
-- never adjacent (adjacent ranges are merged as they are folded).
CREATE TABLE outcome_ranges (
	job       BLOB NOT NULL REFERENCES jobs(id),
	task_from INTEGER NOT NULL,
	task_to   INTEGER NOT NULL,
	PRIMARY KEY (job, task_from)
) STRICT, WITHOUT ROWID;

-- Every replica whose rowid is below below_rowid is done (settled, and its
-- task decided: the Scheduler loads nothing from it) or named in
-- replicas_open. below_lease is the lease of the row just below the
-- mark, so that a table whose rowids changed (a VACUUM) is noticed and
-- read whole. One row, id 1.
CREATE TABLE replica_mark (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	below_rowid INTEGER NOT NULL,
	below_lease TEXT NOT NULL
) STRICT;

-- The replicas below the mark that were not done when it passed them
-- (in play, or settled while their task waits for a decision).
CREATE TABLE replicas_open (
	lease TEXT PRIMARY KEY
) STRICT, WITHOUT ROWID;
