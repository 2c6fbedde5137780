-- A job its owner cancelled (pool.Scheduler.Cancel): unix milliseconds,
-- 0 while it is not. Set once, compare-and-set from 0.
ALTER TABLE jobs ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;
