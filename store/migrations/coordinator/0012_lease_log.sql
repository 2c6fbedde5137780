-- Replicas whose only committed change is their lease (state leased,
-- nothing returned yet) are kept out of replicas: each commit writes
-- them all as one row here instead of a row each (store/leaselog.go).
-- A replica leaves the log for a row of replicas at its first change
-- (returned, expired, released, a heartbeat's new deadline...), so
-- most replicas are written to replicas once or twice instead of two or
-- three times, and a lease's row is never updated in place.
--
-- seq never repeats (AUTOINCREMENT), since rows below the mark are
-- deleted and a reused number would fall below it.
CREATE TABLE lease_log (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	body BLOB NOT NULL
) STRICT;

-- The first row of lease_log that may still hold a replica not yet in
-- replicas: Open reads the log from here. Rows below it hold only
-- replicas that have rows of their own, and are deleted. replicas_rowid
-- is the greatest rowid of replicas when the mark was set: a replica of
-- the log from the mark on that has its row since has a greater one, so
-- Open finds them by reading replicas after it.
CREATE TABLE lease_log_mark (
	id             INTEGER PRIMARY KEY CHECK (id = 1),
	seq            INTEGER NOT NULL,
	replicas_rowid INTEGER NOT NULL
) STRICT;
