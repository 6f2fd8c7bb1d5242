-- What a server declared besides its tools (instructions, prompts, resources), as JSON, with the snapshot;
-- NULL where the capture had none.
ALTER TABLE server_snapshots ADD COLUMN surfaces TEXT;
