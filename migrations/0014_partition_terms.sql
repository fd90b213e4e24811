-- Fencing tokens for cluster partitions. A server that takes a partition
-- over asks the worker to load it with acquire set: the worker raises the
-- partition's term by one, in the same order as everything else it writes,
-- and answers the new term. The server stamps every bucket state it then
-- decides for the partition with that term, and the worker refuses states
-- of an older term: an owner that was cut off or paused can never make its
-- stale states win over the ones its successor decided.

-- +goose Up
CREATE TABLE partition_terms (
  part INTEGER PRIMARY KEY,
  term INTEGER NOT NULL,
  -- The lease write that took the partition at this term (the owners
  -- bucket's incarnation and revision): a request of an older acquisition
  -- that arrives late raises nothing.
  lease_inc INTEGER NOT NULL DEFAULT 0,
  lease_rev INTEGER NOT NULL DEFAULT 0
) STRICT;

-- +goose Down
DROP TABLE partition_terms;
