-- Which known pools this machine has joined (the tray app's pool list and
-- 'idlepool join' with no URL compute for them), with the invite token
-- each was joined with (an invite-only pool asks for it at registration).
ALTER TABLE offer_pools ADD COLUMN joined INTEGER NOT NULL DEFAULT 0;
ALTER TABLE offer_pools ADD COLUMN invite TEXT NOT NULL DEFAULT '';
