-- The owner's settings (idle.Settings) as one JSON document: the weekly
-- schedule, cores, idle time, battery, programs, temperature, GPUs and the
-- owner's pause. One row at most; no row means the defaults. A field the
-- document lacks keeps its default when read, so newer versions may add
-- fields without a migration.
CREATE TABLE settings (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	body    TEXT NOT NULL,    -- JSON of idle.Settings
	updated INTEGER NOT NULL  -- unix milliseconds of the last save
) STRICT;
