-- The idle baseline of the energy meter (package energy): what each
-- device ('cpu', or a GPU's NVML UUID) draws while nothing of ours runs,
-- kept across restarts so that a device computing from its start still
-- subtracts it. measured is when the baseline was last lowered.
CREATE TABLE energy_baseline (
	device   TEXT PRIMARY KEY,
	watts    REAL NOT NULL CHECK (watts >= 0),
	measured INTEGER NOT NULL -- unix milliseconds
) STRICT;
