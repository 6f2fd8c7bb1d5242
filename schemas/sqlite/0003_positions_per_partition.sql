-- A worker reads several input partitions (Kafka): one stored position per partition.
CREATE TABLE consumer_positions (
    consumer TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,           -- the last input offset of this partition whose outputs and state are stored
    PRIMARY KEY (consumer, partition)
);
INSERT INTO consumer_positions (consumer, partition, offset) SELECT consumer, partition, offset FROM consumer_offsets;
DROP TABLE consumer_offsets;
