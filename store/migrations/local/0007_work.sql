-- What each contribution's task took and offered: work instructions
-- counted by the worker's metering rule work_rule (0 and 0 for rows from
-- before metering), sent again with the result; declared, the cost its
-- job declared for the task (job.Job.Cost), the most a receipt credits
-- (0 for rows from before metering). cost stays the agent's estimate
-- until the receipt's replaces it.
ALTER TABLE contributions ADD COLUMN work_rule INTEGER NOT NULL DEFAULT 0;
ALTER TABLE contributions ADD COLUMN work INTEGER NOT NULL DEFAULT 0;
ALTER TABLE contributions ADD COLUMN declared REAL NOT NULL DEFAULT 0;
