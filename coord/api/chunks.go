package api

import "time"

// Bounds of the tracker (docs/api.md, "Chunks").
const (
	// MaxChunksPerRequest bounds the digests of one announcement (added
	// and dropped together) and of one holders question.
	MaxChunksPerRequest = 8192
	// MaxChunksPerPeer bounds what one device may announce it holds: 16
	// GiB of chunks of castore.ChunkSize.
	MaxChunksPerPeer = 1 << 16
	// MaxHoldersPerChunk bounds the holders named for one chunk; the
	// coordinator names a random choice of them, so that askers spread
	// over all holders.
	MaxHoldersPerChunk = 16
	// TrackerTTL is how long a device's announcements count after its
	// last announcement: an agent announces at least every few minutes,
	// so a device gone for longer is not named as a holder.
	TrackerTTL = 30 * time.Minute
)

// ChunkAnnounce is the body of POST /v1/chunks/announce: the chunks this
// device now holds (Add) and no longer holds (Drop); with Replace, Add is
// the whole list and replaces what the device announced before.
type ChunkAnnounce struct {
	Add     []HexDigest `json:"add,omitempty"`
	Drop    []HexDigest `json:"drop,omitempty"`
	Replace bool        `json:"replace,omitempty"`
}

// ChunkAnnounced is the answer to POST /v1/chunks/announce: how many
// chunks the tracker now lists for the device.
type ChunkAnnounced struct {
	Held int `json:"held"`
}

// ChunkHoldersRequest is the body of POST /v1/chunks/holders: the chunks
// whose holders the device asks for (at most MaxChunksPerRequest).
type ChunkHoldersRequest struct {
	Chunks []HexDigest `json:"chunks"`
}

// ChunkHolders is the answer to POST /v1/chunks/holders: for each chunk
// asked that some other device holds, up to MaxHoldersPerChunk peer IDs
// (a random choice when more hold it). The asker is never named.
type ChunkHolders struct {
	Holders map[HexDigest][]string `json:"holders"`
}
