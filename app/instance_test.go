//go:build unix || windows

package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serveInstance serves in until the test ends, sending each request it
// accepts on the returned channel; requests with the command "fail" are
// refused.
func serveInstance(t *testing.T, in *Instance) <-chan Request {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Request, 10)
	served := make(chan error, 1)
	go func() {
		served <- in.Serve(ctx, func(r Request) error {
			if r.Command == "fail" {
				return errors.New("failed")
			}
			got <- r
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	})
	return got
}

func receive(t *testing.T, got <-chan Request) Request {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the instance received no request")
	}
	return Request{}
}

// TestInstanceSecondLaunch starts two instances for one data directory:
// the second sends the first its request and gets ErrRunning; once the
// first ends, a new one claims the directory.
func TestInstanceSecondLaunch(t *testing.T) {
	dir := t.TempDir()
	show := Request{Command: CommandShow, Args: []string{"settings"}}
	first, err := ClaimInstance(dir, TrayInstance, show)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Request, 1)
	served := make(chan error, 1)
	go func() { served <- first.Serve(ctx, func(r Request) error { got <- r; return nil }) }()

	second, err := ClaimInstance(dir, TrayInstance, show)
	if !errors.Is(err, ErrRunning) || second != nil {
		t.Fatalf("second ClaimInstance = %v, %v; want nil, ErrRunning", second, err)
	}
	if diff := cmp.Diff(show, receive(t, got)); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	third, err := ClaimInstance(dir, TrayInstance, show)
	if err != nil {
		t.Fatalf("ClaimInstance after the first ended = %v", err)
	}
	third.Close()
	third.Close() // twice is fine
}

// TestInstanceRequests runs two instances of different names in one data
// directory, as the tray and window processes do, and sends each its
// requests.
func TestInstanceRequests(t *testing.T) {
	dir := t.TempDir()
	tray, err := ClaimInstance(dir, TrayInstance, Request{Command: CommandShow, Args: []string{"settings"}})
	if err != nil {
		t.Fatal(err)
	}
	ui, err := ClaimInstance(dir, "ui", Request{Command: CommandShow, Args: []string{"browse"}})
	if err != nil {
		t.Fatal(err)
	}
	trayGot, uiGot := serveInstance(t, tray), serveInstance(t, ui)

	tests := []struct {
		name, to string
		req      Request
		got      <-chan Request
	}{
		{"reload the tray", TrayInstance, Request{Command: CommandReload}, trayGot},
		{"show in the tray", TrayInstance, Request{Command: CommandShow, Args: []string{"browse", "history"}}, trayGot},
		{"show in the window process", "ui", Request{Command: CommandShow, Args: []string{"firstrun"}}, uiGot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Ask(dir, tc.to, tc.req); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.req, receive(t, tc.got)); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}

	if err := Ask(dir, TrayInstance, Request{Command: "fail"}); !errors.Is(err, ErrRefused) {
		t.Errorf("a request the instance fails = %v, want ErrRefused", err)
	}
	if err := Ask(dir, TrayInstance, Request{Command: CommandShow, Args: []string{"two words"}}); !errors.Is(err, ErrRefused) {
		t.Errorf("a malformed request = %v, want ErrRefused", err)
	}
	if err := Ask(dir, "nobody", Request{Command: CommandReload}); err == nil || errors.Is(err, ErrRefused) {
		t.Errorf("asking an instance that does not run = %v, want an error that is not ErrRefused", err)
	}
	select {
	case r := <-trayGot:
		t.Errorf("the tray received %v after the refused requests", r)
	default:
	}
}
