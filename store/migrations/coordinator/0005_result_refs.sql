-- A result its device kept (pool.ReplicaRecord.Ref, pool.Verified.Ref):
-- the result's chunk manifest as castore's JSON, checked again when read;
-- NULL when the result came inline. outcomes.holders is a JSON array of
-- the peer IDs that hold it, NULL when none. Like result, all three are
-- kept only while the task is undecided (replicas) or until the merger
-- acknowledged the outcome (outcomes).
ALTER TABLE replicas ADD COLUMN ref BLOB;
ALTER TABLE outcomes ADD COLUMN ref BLOB;
ALTER TABLE outcomes ADD COLUMN holders BLOB;
