package webpeer_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"idlepool/webpeer"
)

// TestHandlerServesUnderCSP checks every answer of the page's handler:
// the Content-Security-Policy that keeps the page and its workers to
// the pool's origin, the assets' types, the build it names, generated
// assets from the directory given, a build without them saying how to
// make one, and no path out of the assets.
func TestHandlerServesUnderCSP(t *testing.T) {
	core := fstest.MapFS{"core.wasm": {Data: []byte("\x00asm\x01\x00\x00\x00")}, "wasm_exec.js": {Data: []byte("// go")}}
	with := httptest.NewServer(webpeer.Handler("/join", webpeer.Build{Version: "1.2.3", API: 6}, core))
	defer with.Close()
	without := httptest.NewServer(webpeer.Handler("/join", webpeer.Build{Version: "1.2.3", API: 6}, fstest.MapFS{}))
	defer without.Close()
	for _, tc := range []struct {
		name, url, path string
		status          int
		typ, body       string
	}{
		{"page", with.URL, "/join", 200, "text/html; charset=utf-8", "Donate from this browser"},
		{"script", with.URL, "/join/join.js", 200, "text/javascript; charset=utf-8", "idlepoolPeer"},
		{"profile host", with.URL, "/join/wasi.js", 200, "text/javascript; charset=utf-8", "export async function runTask(module, stdin, opts"},
		{"worker", with.URL, "/join/task-worker.js", 200, "text/javascript; charset=utf-8", `import { runTask } from "./wasi.js"`},
		{"style", with.URL, "/join/join.css", 200, "text/css; charset=utf-8", "body"},
		{"build", with.URL, "/join/build.json", 200, "application/json", `{"version":"1.2.3","api":6}`},
		{"core", with.URL, "/join/core.wasm", 200, "application/wasm", "\x00asm"},
		{"go support", with.URL, "/join/wasm_exec.js", 200, "text/javascript; charset=utf-8", "// go"},
		{"no core", without.URL, "/join/core.wasm", 404, "", "make webpeer"},
		{"unknown", with.URL, "/join/nothing.js", 404, "", ""},
		{"escape", with.URL, "/join/..%2fwebpeer.go", 404, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Get(tc.url + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("GET %s: status %d, want %d", tc.path, resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("Content-Security-Policy"); got != webpeer.CSP {
				t.Errorf("GET %s: Content-Security-Policy %q, want %q", tc.path, got, webpeer.CSP)
			}
			if tc.typ != "" && resp.Header.Get("Content-Type") != tc.typ {
				t.Errorf("GET %s: Content-Type %q, want %q", tc.path, resp.Header.Get("Content-Type"), tc.typ)
			}
			if !strings.Contains(string(b), tc.body) {
				t.Errorf("GET %s: the body lacks %q", tc.path, tc.body)
			}
		})
	}
	for _, want := range []string{"default-src 'self'", "'wasm-unsafe-eval'", "connect-src 'self'", "worker-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(webpeer.CSP, want) {
			t.Errorf("the CSP lacks %q", want)
		}
	}
	if strings.Contains(webpeer.CSP, "unsafe-inline") || strings.Contains(webpeer.CSP, "'unsafe-eval'") {
		t.Errorf("the CSP allows inline code or eval: %s", webpeer.CSP)
	}
}
