-- The creation time of each stream the worker reads, as JetStream reports
-- it. A stream made anew (NATS lost its data, or the stream was deleted)
-- numbers its messages from 1 again; the worker sees a new creation time,
-- and resets what compares sequences: stream_applied for that stream, and
-- buckets.seq when it is the state stream.

-- +goose Up
CREATE TABLE stream_incarnations (
    stream  TEXT PRIMARY KEY,
    created INTEGER NOT NULL -- unix nanoseconds
) WITHOUT ROWID;

-- +goose Down
DROP TABLE stream_incarnations;
