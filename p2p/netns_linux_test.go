package p2p_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/identity"
	"idlepool/p2p"
)

// The namespaces of TestRelayAcrossNamespaces: a router R that runs the
// coordinator and its TURN relay, and two peers A and B, each on its own
// veth link to R with R as its default route. R does not forward (its
// net.ipv4.ip_forward is 0, the default of a new namespace), so A and B
// can reach R's addresses but never each other: the only path between
// them is the relay, as behind two firewalls that drop direct traffic.
const (
	routerA, peerA = "10.231.1.1", "10.231.1.2"
	routerB, peerB = "10.231.2.1", "10.231.2.2"
	roleEnv        = "IDLEPOOL_NETNS_ROLE"
)

func ipCmd(t *testing.T, args ...string) error {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// TestRelayAcrossNamespaces runs a coordinator with a relay and two peers
// in network namespaces the test makes, where no direct path exists: the
// peers connect through the relay, report "relayed" and move a chunk.
func TestRelayAcrossNamespaces(t *testing.T) {
	if os.Getenv(roleEnv) != "" {
		t.Skip("running as a role")
	}
	if testing.Short() {
		t.Skip("makes network namespaces; not in -short")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: no 'ip' command (iproute2) to make network namespaces")
	}
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	nsR, nsA, nsB := "p2pR"+suffix, "p2pA"+suffix, "p2pB"+suffix
	if err := ipCmd(t, "netns", "add", nsR); err != nil {
		t.Skipf("skipped: cannot make a network namespace here (needs root and a kernel that allows it): %v", err)
	}
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsB, nsR} {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	steps := [][]string{
		{"netns", "add", nsA}, {"netns", "add", nsB},
		{"-n", nsR, "link", "set", "lo", "up"},
	}
	for i, side := range []struct{ ns, router, peer string }{{nsA, routerA, peerA}, {nsB, routerB, peerB}} {
		r, p := fmt.Sprintf("p2pr%d%s", i, suffix), fmt.Sprintf("p2pp%d%s", i, suffix)
		steps = append(steps,
			[]string{"link", "add", r, "type", "veth", "peer", "name", p},
			[]string{"link", "set", r, "netns", nsR},
			[]string{"link", "set", p, "netns", side.ns},
			[]string{"-n", nsR, "addr", "add", side.router + "/24", "dev", r},
			[]string{"-n", nsR, "link", "set", r, "up"},
			[]string{"-n", side.ns, "addr", "add", side.peer + "/24", "dev", p},
			[]string{"-n", side.ns, "link", "set", p, "up"},
			[]string{"-n", side.ns, "link", "set", "lo", "up"},
			[]string{"-n", side.ns, "route", "add", "default", "via", side.router},
		)
	}
	for _, s := range steps {
		if err := ipCmd(t, s...); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := exec.Command("ip", "netns", "exec", nsR, "cat", "/proc/sys/net/ipv4/ip_forward").Output(); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("the router namespace forwards (ip_forward %q, %v): the peers could reach each other directly", b, err)
	}

	coordinator := startRole(t, nsR, "coord", nil)
	url := coordinator.line(t, "url=")
	seedSeed, fetchSeed := newSeed(t), newSeed(t)
	seedKey, err := identity.FromSeed(seedSeed)
	if err != nil {
		t.Fatal(err)
	}
	env := func(seed []byte) []string {
		return []string{"IDLEPOOL_NETNS_URL=" + url, "IDLEPOOL_NETNS_KEY=" + hex.EncodeToString(seed),
			"IDLEPOOL_NETNS_SEEDER=" + seedKey.ID()}
	}
	seeder := startRole(t, nsA, "seed", env(seedSeed))
	seeder.line(t, "ready")
	fetcher := startRole(t, nsB, "fetch", env(fetchSeed))
	if got := fetcher.line(t, "fetched "); got != "relayed" {
		t.Errorf("the fetcher's connection is %q, want relayed", got)
	}
	if got := seeder.line(t, "connected "); got != "relayed" {
		t.Errorf("the seeder's connection is %q, want relayed", got)
	}
}

// role is a subprocess running one side of the test in a namespace.
type role struct {
	name  string
	lines chan string
	in    io.WriteCloser
}

// startRole runs this test binary as role in namespace ns; it stops when
// the test ends (its stdin closes).
func startRole(t *testing.T, ns, name string, env []string) *role {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestNetnsRole$", "-test.v")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+name), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &role{name: name, lines: make(chan string, 64), in: in}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-done
			t.Errorf("role %s did not stop within 2 minutes", name)
		}
	})
	return r
}

// line waits for the role's output line that starts with prefix and
// returns the rest.
func (r *role) line(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("role %s ended before printing %q", r.name, prefix)
			}
			if rest, found := strings.CutPrefix(l, "ROLE "+prefix); found {
				return rest
			}
		case <-deadline:
			t.Fatalf("role %s did not print %q within 2 minutes", r.name, prefix)
		}
	}
}

func newSeed(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// netnsChunk is the chunk the seeder serves: 4 MiB.
func netnsChunk() []byte { return bytes.Repeat([]byte("across namespaces"), (4<<20)/17) }

type oneChunk []byte

func (c oneChunk) ReadChunk(d [32]byte) ([]byte, error) {
	if sha256.Sum256(c) == d {
		return c, nil
	}
	return nil, fmt.Errorf("chunk %x: %w", d, os.ErrNotExist)
}

// TestNetnsRole is one side of TestRelayAcrossNamespaces, run in a
// namespace; it does nothing in a plain test run.
func TestNetnsRole(t *testing.T) {
	name := os.Getenv(roleEnv)
	if name == "" {
		t.Skip("a helper of TestRelayAcrossNamespaces")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() // the parent closes stdin to stop us
	if name == "coord" {
		srv, err := coord.New(ctx, coord.Config{Listen: routerA + ":0", DataDir: t.TempDir(), Pool: "netns",
			Relay: coord.RelayConfig{Listen: "0.0.0.0:3478", PublicIP: routerA}})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("ROLE url=%s\n", srv.URL())
		if err := srv.Serve(ctx); err != nil {
			t.Fatal(err)
		}
		return
	}
	seed, _ := hex.DecodeString(os.Getenv("IDLEPOOL_NETNS_KEY"))
	key, err := identity.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.NewClient(os.Getenv("IDLEPOOL_NETNS_URL"), key, &http.Client{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := identity.Generate()
	if _, err := c.Register(ctx, owner, name, ""); err != nil {
		t.Fatal(err)
	}
	cfg := p2p.Config{Key: key, Signaller: c.Signaller(), ConnectTimeout: time.Minute}
	chunk := netnsChunk()
	if name == "seed" {
		cfg.Chunks = oneChunk(chunk)
	}
	n, err := p2p.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	switch name {
	case "seed":
		fmt.Println("ROLE ready")
		for ctx.Err() == nil {
			if conns := n.Conns(); len(conns) > 0 {
				fmt.Printf("ROLE connected %s\n", conns[0].Path)
				break
			}
			time.Sleep(10 * time.Millisecond) // polling a condition
		}
		<-ctx.Done()
	case "fetch":
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer fcancel()
		got, err := n.Fetch(fctx, os.Getenv("IDLEPOOL_NETNS_SEEDER"), sha256.Sum256(chunk))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, chunk) {
			t.Fatal("fetched bytes differ")
		}
		conns := n.Conns()
		if len(conns) != 1 {
			t.Fatalf("connections %+v", conns)
		}
		fmt.Printf("ROLE fetched %s\n", conns[0].Path)
		<-ctx.Done()
	}
}
