//go:build unix || windows

package app

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestInstanceFocus starts two instances for one data directory: the
// second asks the first to focus and gets ErrRunning; once the first
// ends, a new one claims the directory.
func TestInstanceFocus(t *testing.T) {
	dir := t.TempDir()
	first, err := ClaimInstance(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	focused := make(chan struct{}, 1)
	served := make(chan error, 1)
	go func() { served <- first.Serve(ctx, func() { focused <- struct{}{} }) }()

	second, err := ClaimInstance(dir)
	if !errors.Is(err, ErrRunning) || second != nil {
		t.Fatalf("second ClaimInstance = %v, %v; want nil, ErrRunning", second, err)
	}
	select {
	case <-focused:
	case <-time.After(10 * time.Second):
		t.Fatal("the first instance was not asked to focus")
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	third, err := ClaimInstance(dir)
	if err != nil {
		t.Fatalf("ClaimInstance after the first ended = %v", err)
	}
	third.Close()
	third.Close() // twice is fine
}
