// Package webtest starts a headless Chromium for tests that load the
// project's web pages: Debian's chromium driven through the DevTools
// protocol (chromedp), with every console error and uncaught exception
// of the page collected.
//
// Where no Chromium is installed a test skips, saying which package to
// install, unless IDLEPOOL_REQUIRE_BROWSER=1 (CI) makes that a failure.
// Only tests import this package.
package webtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// RequireEnv is the environment variable that turns a missing Chromium
// from a skip into a failure.
const RequireEnv = "IDLEPOOL_REQUIRE_BROWSER"

// Browser is one headless Chromium with one tab.
type Browser struct {
	// Ctx runs chromedp actions in the tab; it ends with the test.
	Ctx context.Context

	mu     sync.Mutex
	errors []string
}

// Errors returns the console errors and uncaught exceptions the tab has
// reported so far, one line each.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// findChromium returns the path of a Chromium or Chrome, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Start starts a headless Chromium for the test, closed when the test
// ends, or skips the test (fails it under IDLEPOOL_REQUIRE_BROWSER=1)
// when none is installed. width and height size its window in CSS
// pixels.
func Start(t testing.TB, width, height int) *Browser {
	t.Helper()
	path := findChromium()
	if path == "" {
		msg := "no Chromium to run the browser test (Debian: apt-get install chromium)"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg + ", and " + RequireEnv + "=1")
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests may run as root, where Chromium's sandbox refuses to start
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx}
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return // the test is over
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.add(fmt.Sprintf("%s at %s:%d: %s", m.Type, m.URL, m.Line+1, m.Text))
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		wg.Wait()
	})
	return b
}

func (b *Browser) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}
