-- Webhook signing secrets are stored sealed from now on (src/sealing.rs);
-- SQLite's TEXT columns hold them as they are. This migration only keeps
-- the two backends' migration sets numbered alike. Safe in itself while
-- instances of the previous release run (it changes nothing); the sealing
-- the new release then does is not, since they cannot open a sealed secret
-- (README, "Upgrades").
SELECT 1;
