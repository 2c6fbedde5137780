package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/pool"
)

// Deviations published on a one-node JetStream: one published again
// writes nothing, a Watch hands over what was stored before it started
// and each deviation stored since, and one naming no device, owner or
// time is refused.
func TestDeviationsPublishWatch(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := OpenDeviations(ctx, nodes[0].JetStream(), 1)
	if err != nil {
		t.Fatalf("OpenDeviations: %v", err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	first := pool.Deviation{Device: "iddevice1", Owner: "idowner", At: at}
	second := pool.Deviation{Device: "iddevice1", Owner: "idowner", At: at.Add(time.Minute)}
	other := pool.Deviation{Device: "id/odd device", Owner: "idother", At: at}
	for _, d := range []pool.Deviation{first, first, second} {
		if err := x.Publish(ctx, d); err != nil {
			t.Fatalf("Publish %+v: %v", d, err)
		}
	}
	if st, err := x.kv.Status(ctx); err != nil || st.Values() != 2 {
		t.Fatalf("bucket after three publishes of two deviations: %v values, %v; want 2", st, err)
	}
	wctx, stop := context.WithCancel(ctx)
	got := make(chan pool.Deviation, 8)
	done := make(chan error, 1)
	go func() { done <- x.Watch(wctx, func(d pool.Deviation) { got <- d }) }()
	var seen []pool.Deviation
	for len(seen) < 2 {
		select {
		case d := <-got:
			seen = append(seen, d)
		case <-ctx.Done():
			t.Fatalf("Watch handed over %+v, want the two stored", seen)
		}
	}
	if err := x.Publish(ctx, other); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		seen = append(seen, d)
	case <-ctx.Done():
		t.Fatal("Watch did not hand over a deviation stored after it started")
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Watch after its context ended: %v", err)
	}
	byTime := cmpopts.SortSlices(func(a, b pool.Deviation) bool {
		return a.Device < b.Device || a.Device == b.Device && a.At.Before(b.At)
	})
	if diff := cmp.Diff([]pool.Deviation{first, second, other}, seen, byTime, cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("deviations handed over (-want +got):\n%s", diff)
	}
	for _, bad := range []pool.Deviation{{Owner: "o", At: at}, {Device: "d", At: at}, {Device: "d", Owner: "o"}} {
		if err := x.Publish(ctx, bad); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("Publish %+v: %v, want ErrBadRequest", bad, err)
		}
	}
}
