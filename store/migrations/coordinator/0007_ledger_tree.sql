-- A ledger entry signed with its batch (pool.Entry.Tree): its inclusion
-- proof in the batch's Merkle tree, whose head sig signs
-- (pool.TreeProof.MarshalBinary); NULL on an entry signed alone, whose
-- sig signs the entry. hash is then the entry's Merkle leaf hash.
ALTER TABLE ledger ADD COLUMN tree BLOB;
