package p2p

import (
	"encoding/json"
	"log/slog"
	"testing"

	"idlepool/identity"
)

// FuzzSignal feeds the JSON of a signal, as the coordinator and a node
// receive it, through decoding, Check and Verify: none may panic, and a
// signal that passes both must survive a round trip unchanged.
func FuzzSignal(f *testing.F) {
	key, err := identity.FromSeed(make([]byte, 32))
	if err != nil {
		f.Fatal(err)
	}
	s := Signal{To: "idother", Session: "00112233445566778899aabbccddeeff", Seq: 7, SentMS: 1, Kind: KindOffer,
		SDP: "v=0\r\na=fingerprint:sha-256 AA:BB\r\n", Fingerprint: "sha-256 AA:BB"}
	s.Sign(key)
	seed, _ := json.Marshal(s)
	f.Add(seed)
	f.Add([]byte(`{"kind":"candidate","candidate":"x","session":"00112233445566778899aabbccddeeff","from":"a","to":"b"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Signal
		if json.Unmarshal(b, &s) != nil {
			return
		}
		if s.Check() != nil || s.Verify(key.Public()) != nil {
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Signal
		if err := json.Unmarshal(again, &back); err != nil || back.Verify(key.Public()) != nil {
			t.Fatalf("a valid signal does not survive a round trip: %v", err)
		}
	})
}

// FuzzChunkMessage feeds arbitrary data-channel messages to a channel's
// receive: it may drop the connection, never panic or block.
func FuzzChunkMessage(f *testing.F) {
	f.Add([]byte{msgRequest, 0, 0, 0, 1})
	f.Add(append([]byte{msgResponse, 0, 0, 0, 1, statusOK, 1}, "data"...))
	f.Add([]byte{'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := &Node{cfg: Config{MaxChunkBytes: 1 << 10, Logger: slog.New(slog.DiscardHandler)}}
		c := &conn{n: n, peer: "idpeer", ready: make(chan struct{}), closed: make(chan struct{})}
		ch := &channel{c: c, reqs: make(chan request, 2*maxInFlight), pending: map[uint32]*call{1: {done: make(chan struct{})}}}
		for range 3 {
			ch.receiveBytes(b, false)
		}
	})
}
