package webpeer

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"idlepool/web"
)

// static holds the page and its assets; core.wasm and wasm_exec.js are
// there only when `make webpeer` built them (they are generated and
// ignored by git).
//
//go:embed static
var static embed.FS

// CoreFiles are the generated assets: the core and Go's JavaScript
// support for it, which must come from the Go that built the core.
var CoreFiles = []string{"core.wasm", "wasm_exec.js"}

// WasiJS is the determinism profile's WASI host (web/wasi.js), which the
// page's task worker imports: Handler serves it at prefix/wasi.js, under
// the page's own CSP.
const WasiJS = "wasi.js"

// CSP is the Content-Security-Policy of every answer of Handler: the page
// loads scripts, workers, styles and connections from the pool's origin
// only, may compile WebAssembly, and may not be framed.
const CSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; connect-src 'self'; " +
	"img-src 'self'; style-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Build says which build serves the page; the page sends it with its
// requests, as a native agent sends its version (coord.VersionHeader,
// coord.APIHeader).
type Build struct {
	Version string `json:"version"`
	API     int    `json:"api"`
}

// Handler serves the browser peer under prefix (e.g. "/join"): the page
// at prefix itself, its assets at prefix/NAME, and prefix/build.json
// with b. core, when not nil, overrides the embedded generated assets
// (CoreFiles): tests build them into a directory of their own. Without
// either, the page says the build has no browser peer and how to make
// one.
func Handler(prefix string, b Build, core fs.FS) http.Handler {
	sub, _ := fs.Sub(static, "static") // the directory is embedded
	buildJSON, _ := json.Marshal(b)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, prefix), "/")
		switch name {
		case "":
			name = "join.html"
		case "build.json":
			h.Set("Content-Type", "application/json")
			h.Set("Cache-Control", "no-store")
			w.Write(buildJSON)
			return
		}
		if name != path.Clean(name) || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		src := fs.FS(sub)
		if core != nil && isCoreFile(name) {
			src = core
		}
		if name == WasiJS {
			src = web.Files
		}
		data, err := fs.ReadFile(src, name)
		if errors.Is(err, fs.ErrNotExist) && isCoreFile(name) {
			http.Error(w, "this build of idlepool has no browser peer: build it with make (make webpeer)", http.StatusNotFound)
			return
		}
		if err != nil {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", contentType(name))
		h.Set("Cache-Control", "no-cache")
		w.Write(data)
	})
}

func isCoreFile(name string) bool { return name == CoreFiles[0] || name == CoreFiles[1] }

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".wasm":
		return "application/wasm"
	}
	return "application/octet-stream"
}

// BuildCore builds the core (./webpeer/core, GOOS=js GOARCH=wasm) into
// dir/core.wasm and copies the Go toolchain's wasm_exec.js beside it,
// with the go command found in PATH; moduleRoot is the directory of this
// module's go.mod. It is what `make webpeer` does, for tests that serve
// a fresh core (Handler's core argument). Errors carry the compiler's
// output.
func BuildCore(moduleRoot, dir string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, CoreFiles[0]), "./webpeer/core")
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the browser peer's core: %w\n%s", err, out)
	}
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("find GOROOT: %w", err)
	}
	js, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "lib", "wasm", CoreFiles[1]))
	if err != nil {
		return fmt.Errorf("read Go's %s: %w", CoreFiles[1], err)
	}
	return os.WriteFile(filepath.Join(dir, CoreFiles[1]), js, 0o644)
}
