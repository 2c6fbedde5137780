package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/pool"
)

// watchExclusions runs x.Watch until the test ends, sending each
// exclusion it hands over on the returned channel.
func watchExclusions(t *testing.T, x *Exclusions) <-chan pool.Exclusion {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan pool.Exclusion, 64)
	done := make(chan error, 1)
	go func() { done <- x.Watch(ctx, func(e pool.Exclusion) { got <- e }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch after its context ended: %v", err)
		}
	})
	return got
}

// receive reads n exclusions from got, failing the test after a minute
// (a loaded machine) without them.
func receive(t *testing.T, got <-chan pool.Exclusion, n int) []pool.Exclusion {
	t.Helper()
	var out []pool.Exclusion
	timeout := time.After(time.Minute)
	for len(out) < n {
		select {
		case e := <-got:
			out = append(out, e)
		case <-timeout:
			t.Fatalf("Watch handed over %d exclusions, want %d: %+v", len(out), n, out)
		}
	}
	return out
}

var byDeviceThenUntil = cmpopts.SortSlices(func(a, b pool.Exclusion) bool {
	if a.Device != b.Device {
		return a.Device < b.Device
	}
	return a.Until.Before(b.Until)
})

// Exclusions published on a one-node JetStream: a later exclusion of an
// owner is not shortened by an earlier one published after it, the same
// one published again writes nothing, and a Watch hands over what was
// stored before it started and each exclusion stored since, once per key
// (device and owner) that holds it.
func TestExclusionsPublishWatch(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := OpenExclusions(ctx, nodes[0].JetStream(), 1)
	if err != nil {
		t.Fatalf("OpenExclusions: %v", err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const owner = "idowner"
	long := pool.Exclusion{Device: "iddevice1", Owner: owner, Until: at.Add(2 * time.Hour), Reason: "3 deviations within 24h0m0s"}
	short := pool.Exclusion{Device: "iddevice2", Owner: owner, Until: at.Add(time.Hour), Reason: "3 deviations within 24h0m0s"}
	for _, e := range []pool.Exclusion{long, short} {
		if err := x.Publish(ctx, e); err != nil {
			t.Fatalf("Publish %s: %v", e.Device, err)
		}
	}
	revision := func(key string) uint64 {
		t.Helper()
		e, err := x.kv.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		return e.Revision()
	}
	ownerKey := exclusionKey("owner", owner)
	rev := revision(ownerKey)
	if err := x.Publish(ctx, long); err != nil {
		t.Fatalf("Publish again: %v", err)
	}
	if r := revision(ownerKey); r != rev {
		t.Errorf("the owner's key went from revision %d to %d on publishing the same exclusion again", rev, r)
	}

	// Stored before the watch: each device's own, and the owner's
	// longer one.
	got := watchExclusions(t, x)
	if diff := cmp.Diff([]pool.Exclusion{long, long, short}, receive(t, got, 3), byDeviceThenUntil); diff != "" {
		t.Errorf("exclusions stored before the watch (-want +got):\n%s", diff)
	}

	// Stored since: a longer one lengthens both keys; a shorter one of
	// the owner's lengthens its device's key only.
	longer := long
	longer.Until = at.Add(3 * time.Hour)
	if err := x.Publish(ctx, longer); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pool.Exclusion{longer, longer}, receive(t, got, 2)); diff != "" {
		t.Errorf("a longer exclusion (-want +got):\n%s", diff)
	}
	third := pool.Exclusion{Device: "iddevice3", Owner: owner, Until: at.Add(90 * time.Minute)}
	if err := x.Publish(ctx, third); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pool.Exclusion{third}, receive(t, got, 1)); diff != "" {
		t.Errorf("a shorter exclusion of the owner (-want +got):\n%s", diff)
	}
	// Nothing more: a marker exclusion, published last, is the next one.
	marker := pool.Exclusion{Device: "idmarker", Owner: "idother", Until: at}
	if err := x.Publish(ctx, marker); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pool.Exclusion{marker, marker}, receive(t, got, 2)); diff != "" {
		t.Errorf("after the shorter exclusion (-want +got):\n%s", diff)
	}

	// A second watch, started now, sees the newest of each key.
	got2 := watchExclusions(t, x)
	want := []pool.Exclusion{longer, longer, short, third, marker, marker}
	if diff := cmp.Diff(want, receive(t, got2, len(want)), byDeviceThenUntil); diff != "" {
		t.Errorf("a new watch (-want +got):\n%s", diff)
	}
}

// Nodes publishing exclusions of one owner at once: the owner's key ends
// with the exclusion that ends last, whatever the order of the writes.
func TestExclusionsConcurrentPublish(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			// Each its own handle, as each node has.
			x, err := OpenExclusions(ctx, nodes[0].JetStream(), 1)
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = x.Publish(ctx, pool.Exclusion{Device: fmt.Sprintf("iddev%d", i), Owner: "idowner", Until: at.Add(time.Duration(i) * time.Minute)})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	x, err := OpenExclusions(ctx, nodes[0].JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	e, err := x.kv.Get(ctx, exclusionKey("owner", "idowner"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"device":"iddev%d","owner":"idowner","until":%d}`, n-1, at.Add((n-1)*time.Minute).UnixMilli())
	if string(e.Value()) != want {
		t.Errorf("the owner's key holds %s, want %s", e.Value(), want)
	}
}

// IDs that are not identity IDs make valid, distinct keys and come back
// as they were; an exclusion without device, owner or end is refused.
func TestExclusionsKeys(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"idabcxyz234567", "device.idabcxyz234567"},
		{"a.b c/*>", "device.a_2eb_20c_2f_2a_3e"},
		{"a_2e", "device.a_5f2e"},
		{"Ä", "device._c3_84"},
	} {
		if got := exclusionKey("device", tc.id); got != tc.want {
			t.Errorf("exclusionKey(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := OpenExclusions(ctx, nodes[0].JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	odd := pool.Exclusion{Device: "a.b c/*>", Owner: "owner.>", Until: at}
	if err := x.Publish(ctx, odd); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if diff := cmp.Diff([]pool.Exclusion{odd, odd}, receive(t, watchExclusions(t, x), 2)); diff != "" {
		t.Errorf("watched (-want +got):\n%s", diff)
	}
	for _, e := range []pool.Exclusion{{Owner: "o", Until: at}, {Device: "d", Until: at}, {Device: "d", Owner: "o"}} {
		if err := x.Publish(ctx, e); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("Publish(%+v) = %v, want ErrBadRequest", e, err)
		}
	}
}
