-- No query reads replicas by job and task (Load reads them all, Replica
-- by lease), so their index only cost every lease and update a B-tree
-- insert of its own (docs/benchmarks.md).
DROP INDEX replicas_job_task;
