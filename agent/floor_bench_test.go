//go:build unix

package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sync/errgroup"
)

// floorServerEnv, when set to a size in bytes, makes the test binary the
// server of BenchmarkHTTPFloor: a net/http server on 127.0.0.1 whose one
// handler reads a request's body and answers that many bytes. It prints
// its URL on stdout and serves until SIGTERM.
const floorServerEnv = "IDLEPOOL_BENCH_FLOOR_SERVER"

func init() {
	if v := os.Getenv(floorServerEnv); v != "" {
		os.Exit(floorServer(v))
	}
}

// floorServer serves BenchmarkHTTPFloor's server, answering size bytes,
// and returns the process's exit code.
func floorServer(size string) int {
	n, err := strconv.Atoi(size)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "%s: %q is not a size in bytes\n", floorServerEnv, size)
		return 2
	}
	answer := bytes.Repeat([]byte{'x'}, n)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/cbor")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.Write(answer)
	})}
	go func() { <-ctx.Done(); srv.Close() }()
	fmt.Printf("http://%s\n", l.Addr())
	if err := srv.Serve(l); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// BenchmarkHTTPFloor is the floor under a coordinator's CPU per request
// on this machine: what Go's net/http server alone spends to read a
// POST's headers and body and answer it, with nothing behind it (no
// MAC, no CBOR, no scheduler, no store). The server is this binary run
// again, so that server-cpu-µs/request is its own CPU time (from
// /proc); 32 keep-alive clients (BenchmarkCoordinator's 8 agents of 4
// slots, each connection opened before the clock starts) ask it over
// 127.0.0.1 in turn, b.N requests in all. "one" is a request of one
// result and an answer of one lease, as a pool of long tasks sends
// (about 500 bytes each way); "batch" one of the size a busy
// BenchmarkCoordinator's agents send (4 KiB in, 10 KiB out).
//
//	go test -run '^$' -bench HTTPFloor -benchtime 100000x ./agent/
func BenchmarkHTTPFloor(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads the server's CPU time from /proc")
	}
	for _, c := range []struct {
		name          string
		request, answ int
	}{{"one", 500, 500}, {"batch", 4 << 10, 10 << 10}} {
		b.Run(c.name, func(b *testing.B) { benchFloor(b, c.request, c.answ) })
	}
}

// benchFloor runs BenchmarkHTTPFloor's server answering answer bytes and
// sends it b.N requests of request bytes.
func benchFloor(b *testing.B, request, answer int) {
	url, pid := startSelf(b, floorServerEnv+"="+strconv.Itoa(answer), "floor server")
	const clients = 32
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = clients
	var dials atomic.Int64
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := bytes.Repeat([]byte{'y'}, request)
	// post sends one request; its answer is read once held returns, so
	// that a connection stays busy until then.
	post := func(held func()) error {
		resp, err := client.Post(url, "application/cbor", bytes.NewReader(body))
		held()
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && (resp.StatusCode != http.StatusOK || n != int64(answer)) {
			err = fmt.Errorf("answer %s of %d bytes, want 200 OK of %d", resp.Status, n, answer)
		}
		return err
	}
	// Every connection open before the clock starts: 32 requests at
	// once, none read until all are answered, so that each has a
	// connection of its own.
	var warm errgroup.Group
	var all sync.WaitGroup
	all.Add(clients)
	for range clients {
		warm.Go(func() error { return post(func() { all.Done(); all.Wait() }) })
	}
	if err := warm.Wait(); err != nil {
		b.Fatal(err)
	}
	if n := dials.Load(); n != clients {
		b.Fatalf("%d connections opened before the clock started, want %d", n, clients)
	}
	left := atomic.Int64{}
	left.Store(int64(b.N))
	b.ResetTimer()
	cpu0, ok0 := childCPU(pid)
	var g errgroup.Group
	for range clients {
		g.Go(func() error {
			for left.Add(-1) >= 0 {
				if err := post(func() {}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := g.Wait()
	cpu1, ok1 := childCPU(pid)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	// A connection handed back a moment after its answer was read can
	// make the transport open another: counted, not refused.
	b.ReportMetric(float64(dials.Load()), "connections")
	if ok0 && ok1 {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "server-cpu-µs/request")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}
