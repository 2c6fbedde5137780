package p2p

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkFetchLoopback measures chunk throughput over one connection on
// loopback: b.SetBytes per chunk, so the MB/s column is per connection.
// Run: go test -run '^$' -bench FetchLoopback ./p2p/
func BenchmarkFetchLoopback(b *testing.B) {
	for _, bc := range []struct {
		chunk, frame, channels, parallel int
		window                           int
	}{
		{1 << 20, 60 << 10, 1, 1, 1 << 20},
		{1 << 20, 60 << 10, 1, 1, 8 << 20},
		{1 << 20, 60 << 10, 4, 8, 1 << 20},
		{1 << 20, 60 << 10, 4, 8, 8 << 20},
		{1 << 20, 16 << 10, 4, 8, 8 << 20},
		{1 << 20, 60 << 10, 8, 16, 8 << 20},
	} {
		name := fmt.Sprintf("chunk=%dKiB/frame=%dKiB/channels=%d/parallel=%d/window=%dMiB", bc.chunk>>10, bc.frame>>10, bc.channels, bc.parallel, bc.window>>20)
		b.Run(name, func(b *testing.B) {
			chunk := bytes.Repeat([]byte("benchmark bytes!"), bc.chunk/16)
			d := sha256.Sum256(chunk)
			h := newHub()
			t := &testing.T{}
			_ = t
			cfg := Config{FrameBytes: bc.frame, Channels: bc.channels, SCTPReceiveBufferBytes: bc.window}
			cfgA := cfg
			cfgA.Chunks = newMemChunks(chunk)
			a := benchNode(b, h, cfgA)
			c := benchNode(b, h, cfg)
			ctx := ctxT(b)
			if _, err := c.Fetch(ctx, a.ID(), d); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			var wg sync.WaitGroup
			work := make(chan struct{})
			for range bc.parallel {
				wg.Go(func() {
					for range work {
						if _, err := c.Fetch(ctx, a.ID(), d); err != nil {
							b.Error(err)
						}
					}
				})
			}
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
		})
	}
}
