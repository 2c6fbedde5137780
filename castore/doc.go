// Package castore is the donor's content-addressed chunk store and the
// fetcher that fills it from several sources at once: the data layer of
// the peer-to-peer data plane (DESIGN.md, invariant 10).
//
// A file (a job's program or input) is cut into chunks of ChunkSize bytes
// (the last one shorter), each named by its SHA-256. A Manifest lists a
// file's chunks in order, with their sizes and the whole file's SHA-256,
// so that the file can be put together again from chunks fetched from
// anywhere and checked as a whole.
//
// A Store keeps chunks on disk under a byte cap that the donor sets,
// evicting the least recently used chunks that no current task holds
// (Hold). Every chunk is checked against its digest when it is written
// and again when it is read, and is written to a temporary file, synced
// and renamed into place, so a crash never leaves a wrong chunk under a
// digest's name. Once a file is put together (Assemble) its chunks can be
// served from that copy (AddFile), so a device keeps no file twice.
// ReadChunk is the method the network layer serves peers from.
//
// A Fetcher fetches a manifest's missing chunks from the peers that hold
// them (as a Locator such as the coordinator's tracker says), rarest
// first, several sources at once, checking every digest; the coordinator
// is the fallback source for chunks no peer can give.
//
// Example:
//
//	st, err := castore.Open(castore.Config{Dir: dir, CapBytes: 2 << 30})
//	m, err := castore.ManifestOfFile(path)
//	f := &castore.Fetcher{Store: st, Fallback: coordinator, Locate: tracker, Peers: dial, Device: myID}
//	release := st.Hold(m.Digests())
//	defer release()
//	stats, err := f.Fetch(ctx, m)
//	err = st.Assemble(m, dst)
//
// A Store and a Fetcher are safe for concurrent use.
package castore
