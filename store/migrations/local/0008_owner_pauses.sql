-- How long the owner's use of this machine keeps it from computing, by
-- the local hour of day the pause began (0..23): how many pauses were
-- seen and their running mean in milliseconds (agent.OwnerPattern). The
-- donor predicts from it whether a task suspended for the owner is
-- handed back at once. 24 rows at most; it never leaves this machine.
CREATE TABLE owner_pauses (
	hour    INTEGER PRIMARY KEY CHECK (hour BETWEEN 0 AND 23),
	count   INTEGER NOT NULL CHECK (count >= 0),
	mean_ms INTEGER NOT NULL CHECK (mean_ms >= 0)
) STRICT;
