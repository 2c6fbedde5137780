-- Owners' signed profiles (identity.Profile: a display name and a link),
-- as the owner's devices sent them when registering; the latest issued one
-- per owner. profile is the JSON the owner signed, checked before it is
-- stored and again when read.
CREATE TABLE owner_profiles (
	owner   TEXT PRIMARY KEY,
	issued  INTEGER NOT NULL, -- unix milliseconds, the profile's Issued
	profile BLOB NOT NULL
) STRICT;
