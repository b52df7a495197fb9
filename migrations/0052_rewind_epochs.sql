-- The rewind epochs of a session, so that an encrypted turn is bound to the rewind epoch it was
-- written in and a ciphertext saved before a rewind cannot be written back at a position the
-- rewind freed (docs/decisions/0022-encryption-key-store.md). Pairs (cut, epoch) of the
-- rewinds still standing, flat and in ascending order of both: a rewind to cut c drops the
-- pairs with a cut at or above c and appends (c, the newest epoch + 1). NULL: never rewound.
-- The turn at seq s was written in the epoch of the last pair whose cut is <= s (0 if none).
ALTER TABLE shardstore.sessions ADD COLUMN rewind_epochs bigint[];
