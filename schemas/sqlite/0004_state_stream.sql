-- Detector state moves with its input partition (consumer groups): each key records its stream.
ALTER TABLE detector_state ADD COLUMN stream INTEGER NOT NULL DEFAULT 0;
