-- What this device learnt about the jobs it computed or browsed, so that
-- its history and its windows name them: the manifest's name, description
-- and link, the owner's ID and the display name and link of the owner's
-- signed profile (checked before it was noted). seen: unix milliseconds.
CREATE TABLE job_notes (
	job         BLOB PRIMARY KEY,
	pool        TEXT NOT NULL DEFAULT '',
	name        TEXT NOT NULL DEFAULT '',
	description TEXT NOT NULL DEFAULT '',
	link        TEXT NOT NULL DEFAULT '',
	owner       TEXT NOT NULL DEFAULT '',
	owner_name  TEXT NOT NULL DEFAULT '',
	owner_link  TEXT NOT NULL DEFAULT '',
	seen        INTEGER NOT NULL
) STRICT;
