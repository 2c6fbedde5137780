// Package p2p is the network layer of the peer-to-peer data plane:
// WebRTC data channels (pion/webrtc) between devices, set up through
// signals the coordinator relays, a chunk request/response protocol on
// them, and an embeddable TURN relay (pion/turn) for networks where a
// direct connection fails.
//
// A Node is one device's end. It connects to another device by device ID
// (Connect, or Fetch, which connects when needed), accepts the offers of
// others, serves chunks from a ChunkReader and fetches chunks by SHA-256
// digest, checking every byte against the digest:
//
//	n, err := p2p.NewNode(p2p.Config{Key: deviceKey, Signaller: client, Chunks: store})
//	go n.Serve(ctx)
//	b, err := n.Fetch(ctx, peerID, digest) // sha256(b) == digest
//
// Trust: every signal is signed by its sender's device key and numbered
// (Signal); the coordinator and the receiver refuse a forged or replayed
// one. The offer and answer carry the sender's DTLS certificate
// fingerprint under that signature, and a connection whose handshake
// shows another certificate is dropped (ErrFingerprint). So a connection
// is to the device the coordinator vouched for, or it is not made.
//
// Each connection reports whether its bytes travel direct (host, server
// or peer reflexive candidates) or through a relay (Conns, Stats).
//
// Bounds: Config.MaxPeers connections, chunks of at most MaxChunkBytes
// sent as frames of FrameBytes, at most 16 open requests per data channel
// and side (a peer sending more is dropped), a data channel buffers at
// most 4 MiB before a sender waits (OnBufferedAmountLow), an optional
// upload cap shared by a device's Nodes (Config.Upload, UploadLimit), and
// setup and requests have timeouts.
//
// Concurrency and ownership: a Node's methods are safe for concurrent
// use. Serve owns every goroutine the Node starts; when its context ends
// it closes every connection and waits for them before it returns.
package p2p
