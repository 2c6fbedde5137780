-- The energy each task this device computed added (package energy):
-- one row per task and device ('cpu', or a GPU's NVML UUID), with how
-- the joules were obtained and the task's span. Kept for every task that
-- ran, also those handed back, since the donor paid for them; never
-- part of a receipt's cost.
CREATE TABLE task_energy (
	lease   TEXT NOT NULL,
	device  TEXT NOT NULL,
	pool    TEXT NOT NULL,
	job     BLOB NOT NULL,
	task    INTEGER NOT NULL,
	joules  REAL NOT NULL CHECK (joules >= 0),
	how     TEXT NOT NULL CHECK (how IN ('measured', 'sampled', 'estimated')),
	started INTEGER NOT NULL, -- unix milliseconds
	ended   INTEGER NOT NULL, -- unix milliseconds
	day     TEXT NOT NULL,    -- YYYY-MM-DD, local time at the end
	PRIMARY KEY (lease, device)
) STRICT;
CREATE INDEX task_energy_ended ON task_energy(ended);
