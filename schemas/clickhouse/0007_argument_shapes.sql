-- The shapes of the arguments an agent's calls sent, per agent rollup row (encoded `ArgumentShapes`; empty on
-- rows written before it, which is no recorded arguments).
ALTER TABLE agent_rollups ADD COLUMN IF NOT EXISTS arguments String DEFAULT '';
