// Package cluster holds a clustered pool's state in NATS JetStream, so
// that the pool's coordination survives the loss of a machine
// (docs/operator.md, "A pool on several machines"; RATIONALE.md, "A pool
// on several machines").
//
// A node (StartNode) is an embedded NATS server with JetStream, joined
// to the other nodes by TLS routes with a shared password (Init makes
// every node's files: cluster.toml, certificates, the pool key). On it:
//
//   - Store implements pool.Store: the pool's committed batches are
//     messages of the replicated stream StateStream, appended with the
//     expected last sequence (a node that lost its lease cannot write)
//     and a message ID (a retried append is not written twice), and
//     replayed into memory by every node; snapshots in the object store
//     SnapshotBucket bound the replay, the replicas that are done move
//     to the key-value bucket ArchiveBucket and the ledger's older
//     entries, in ranges, to LedgerBucket, both read on demand, so that
//     a snapshot and a node's memory hold the work in play and the
//     ledger's newest entries rather than every replica ever leased and
//     every receipt ever signed;
//   - Leadership is the lease, in a JetStream key-value bucket, that
//     makes one node at a time the one in charge of scheduling; it is
//     renewed well within its TTL and taken over when it lapses;
//   - Blobs mirrors the pool's files (programs and inputs, by digest)
//     into a JetStream object store.
//
// Package coord builds the HTTP side on these (coord.ServeCluster): the
// node in charge runs the coordinator; the others forward to it.
//
// Shards (RATIONALE.md, "Dividing the work among the nodes"): a pool's
// work may be divided into K shards, 1 to MaxShards, a job's shard being
// ShardOf(its ID, K), or in a pool begun since jobs are placed by load
// (LoadPlacement, recorded by Rules.ClaimShards) the shard with the
// fewest tasks waiting when it was added, recorded in the bucket
// PlacementsBucket (Placements). A Shard names its own state stream, snapshot
// store, archive buckets and leader key; shard 0's are the names above,
// so an undivided pool is shard 0 of 1 and the zero Shard is that one.
// StoreConfig.Shard opens a shard's Store; Leadership.TryLeadShard
// takes a shard's lease, Leaders lists who leads which, and
// Leadership.Campaign keeps a node leading its fair share
// (ShouldCampaign: fewer than ceil(K / live nodes)). Exclusions keeps
// the devices and owners that any shard's scheduler excluded, in the
// bucket ExclusionsBucket, for every shard to apply
// (coord.ClusterHooks.Exclusions). Package coord does not use them yet:
// it runs one shard, shard 0, as before.
//
// Example, a node from the files Init made:
//
//	cfg, err := cluster.LoadConfig("node1/cluster.toml")
//	if err != nil { ... }
//	node, err := cluster.StartNode(ctx, cfg, log)
//	if err != nil { ... }
//	defer node.Close()
//	err = coord.ServeCluster(ctx, node, coord.Config{...})
//
// Concurrency: a Node, a Store, a Leadership and a Blobs are safe for
// concurrent use; a Term (one tenure of the lease) ends when its Lost
// channel closes; a Campaign is one goroutine, owned by its caller,
// that ends its terms when its context ends.
package cluster
