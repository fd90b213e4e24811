-- Where this database stands in the replication log a worker keeps for its
-- standby (internal/worker/repl.go): the sequence of the last log record
-- its rows include, the newest epoch (lease term) seen in the log, and the
-- creation time of the log stream those sequences belong to. One row.

-- +goose Up
CREATE TABLE repl_state (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    seq         INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    log_created INTEGER NOT NULL -- unix nanoseconds; 0 before any log
);
INSERT INTO repl_state (id, seq, epoch, log_created) VALUES (1, 0, 0, 0);

-- +goose Down
DROP TABLE repl_state;
