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
		smallUDP, crc                    bool
	}{
		// pion's defaults: 1 MiB window, system UDP buffers, CRC32c.
		{1 << 20, 60 << 10, 1, 1, 1 << 20, true, true},
		{1 << 20, 60 << 10, 1, 1, 8 << 20, true, true},
		{1 << 20, 60 << 10, 1, 1, 8 << 20, false, true},
		{1 << 20, 60 << 10, 1, 1, 8 << 20, false, false},
		{1 << 20, 16 << 10, 1, 1, 8 << 20, false, false},
		{1 << 20, 60 << 10, 4, 8, 8 << 20, false, false},
	} {
		udp := "4MiB"
		if bc.smallUDP {
			udp = "system"
		}
		name := fmt.Sprintf("chunk=%dKiB/frame=%dKiB/channels=%d/parallel=%d/window=%dMiB/udpbuf=%s/crc=%v", bc.chunk>>10, bc.frame>>10, bc.channels, bc.parallel, bc.window>>20, udp, bc.crc)
		b.Run(name, func(b *testing.B) {
			chunk := bytes.Repeat([]byte("benchmark bytes!"), bc.chunk/16)
			d := sha256.Sum256(chunk)
			h := newHub()
			cfg := Config{FrameBytes: bc.frame, Channels: bc.channels, SCTPReceiveBufferBytes: bc.window, smallUDPBuffers: bc.smallUDP, sctpChecksum: bc.crc}
			cfgA := cfg
			cfgA.Chunks = newMemChunks(chunk)
			a := benchNode(b, h, cfgA)
			c := benchNode(b, h, cfg)
			ctx := ctxT(b)
			if _, err := c.Fetch(ctx, a.ID(), d); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(chunk)))
			cpu0 := cpuTime(b)
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
			b.StopTimer()
			// CPU time of both ends (one process): the figure that does
			// not depend on what else the machine runs.
			if cpu := (cpuTime(b) - cpu0).Seconds(); cpu > 0 && cpu0 >= 0 {
				b.ReportMetric(float64(b.N)*float64(len(chunk))/1e6/cpu, "MB/cpu-s")
			}
		})
	}
}
