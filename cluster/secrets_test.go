package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// Known-answers digests published on a one-node JetStream: one published
// again writes nothing, a Watch hands over what was stored before it
// started and each digest stored since, and the zero digest is refused.
func TestSecretsPublishWatch(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := OpenSecrets(ctx, nodes[0].JetStream(), 1)
	if err != nil {
		t.Fatalf("OpenSecrets: %v", err)
	}
	first, second := job.Digest{1}, job.Digest{2}
	for _, d := range []job.Digest{first, first} {
		if err := x.Publish(ctx, d); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if err := x.Publish(ctx, job.Digest{}); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("Publish of the zero digest: %v, want ErrBadRequest", err)
	}
	wctx, stop := context.WithCancel(ctx)
	got := make(chan job.Digest, 8)
	done := make(chan error, 1)
	go func() { done <- x.Watch(wctx, func(d job.Digest) { got <- d }) }()
	receive := func(want job.Digest) {
		t.Helper()
		select {
		case d := <-got:
			if d != want {
				t.Fatalf("Watch handed over %s, want %s", d, want)
			}
		case <-ctx.Done():
			t.Fatalf("Watch did not hand over %s", want)
		}
	}
	receive(first)
	if err := x.Publish(ctx, second); err != nil {
		t.Fatal(err)
	}
	receive(second)
	stop()
	if err := <-done; err != nil {
		t.Errorf("Watch after its context ended: %v", err)
	}
	select {
	case d := <-got:
		t.Errorf("Watch handed over %s more: a digest published twice is one key", d)
	default:
	}
}
