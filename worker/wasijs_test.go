package worker

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"idlepool/web"
	"idlepool/web/webtest"
)

// The tests below run tasks through web/wasi.js, the determinism
// profile's host for browsers, and compare every outcome with the native
// worker's, byte for byte: the profile's test vectors and tasks of the pi
// example, in Node and in headless Chromium (in a Web Worker, as a
// browser peer runs it). worker/testdata/vectors/harness.mjs runs the
// tasks on the JavaScript side.

// jsTask is one task for harness.mjs.
type jsTask struct {
	Module           string `json:"module"`
	Seed             string `json:"seed"`
	Stdin            string `json:"stdin"` // hex
	MemoryLimitPages uint32 `json:"memoryLimitPages"`
	MaxStdoutBytes   int    `json:"maxStdoutBytes,omitempty"` // 0: the default
	InputDir         bool   `json:"inputDir,omitempty"`       // an empty /input on fd 3
	// Inputs are the files of /input by name, in hex (with an empty
	// directory "chunks", as a pool task's input directory has).
	Inputs map[string]string `json:"inputs,omitempty"`
}

// jsRequest is what harness.mjs reads: the modules, metered as the worker
// runs them, in hex by name, and the tasks.
type jsRequest struct {
	Modules map[string]string `json:"modules"`
	Tasks   []jsTask          `json:"tasks"`
}

// jsOutcome is one task's outcome in harness.mjs's form.
type jsOutcome struct {
	Stdout  *string  `json:"stdout"` // hex; null when the task failed
	Stderr  *string  `json:"stderr"` // hex; null when empty
	Failure *Failure `json:"failure"`
	Work    string   `json:"work"`
	Error   *string  `json:"error"`
}

var (
	piOnce sync.Once
	piMod  testModule
	piErr  error
)

// buildPi builds examples/pi for wasip1 once per test binary.
func buildPi(t testing.TB) testModule {
	t.Helper()
	piOnce.Do(func() { piMod, piErr = buildWasm(filepath.Join(testDir, "pi.wasm"), "../examples/pi") })
	if piErr != nil {
		t.Fatal(piErr)
	}
	return piMod
}

var (
	jsOnce   sync.Once
	jsReq    jsRequest
	jsNative []Request
)

// jsCases returns the tasks both hosts run: every task of the vectors
// three tasks of pi and one with an empty input directory, with the native worker's requests. Built once
// per test binary (metering pi takes a while under the race detector).
func jsCases(t testing.TB) (jsRequest, []Request) {
	t.Helper()
	needHostile(t) // a go tool to build pi
	buildVectors(t)
	buildPi(t)
	jsOnce.Do(func() { jsReq, jsNative = makeJSCases(t) })
	if jsReq.Modules == nil {
		t.Fatal("the tasks for both hosts could not be made (see the first test that tried)")
	}
	return jsReq, jsNative
}

func makeJSCases(t testing.TB) (jsRequest, []Request) {
	t.Helper()
	needHostile(t) // a go tool to build pi
	vec := buildVectors(t)
	pi := buildPi(t)
	inputs, err := buildWasm(filepath.Join(testDir, "inputs.wasm"), "./testdata/inputs")
	if err != nil {
		t.Fatal(err)
	}
	req := jsRequest{Modules: map[string]string{}}
	for name, m := range map[string]testModule{"vectors": vec, "pi": pi, "inputs": inputs} {
		bin, err := os.ReadFile(m.path)
		if err != nil {
			t.Fatal(err)
		}
		metered, err := meterModule(bin)
		if err != nil {
			t.Fatal(err)
		}
		req.Modules[name] = hex.EncodeToString(metered)
	}
	var native []Request
	for _, vt := range readVectors(t).Tasks {
		r := vectorsRequest(t, vec, vt)
		native = append(native, r)
		req.Tasks = append(req.Tasks, jsTask{Module: "vectors", Seed: vt.Seed, Stdin: hex.EncodeToString(r.Stdin), MemoryLimitPages: vt.MemoryLimitPages, MaxStdoutBytes: vt.MaxStdoutBytes})
	}
	for i := range 3 {
		stdin := fmt.Appendf(nil, `{"job":"wasijs-test","index":%d,"seed":%d,"params":{"samples":%d}}`, i, 1000+7*i, 2000+i)
		var seed [32]byte
		seed[0], seed[31] = byte(i), 0x5a
		native = append(native, Request{ModulePath: pi.path, ModuleSHA256: pi.sha, Stdin: stdin, Seed: seed, Timeout: time.Minute})
		req.Tasks = append(req.Tasks, jsTask{Module: "pi", Seed: hex.EncodeToString(seed[:]), Stdin: hex.EncodeToString(stdin), MemoryLimitPages: DefaultMemoryLimitMiB * pagesPerMiB})
	}
	// A pool task always has an input directory (the browser peer's
	// tasks too): an empty one, as the peer runs them.
	stdin := []byte(`{"job":"wasijs-test","index":9,"seed":9,"params":{"samples":2000}}`)
	var seed [32]byte
	seed[0] = 9
	empty := filepath.Join(testDir, "empty-input") // lives as long as the test binary, like jsNative
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	native = append(native, Request{ModulePath: pi.path, ModuleSHA256: pi.sha, Stdin: stdin, Seed: seed, Timeout: time.Minute, InputDir: empty})
	req.Tasks = append(req.Tasks, jsTask{Module: "pi", Seed: hex.EncodeToString(seed[:]), Stdin: hex.EncodeToString(stdin), MemoryLimitPages: DefaultMemoryLimitMiB * pagesPerMiB, InputDir: true})
	// A task with input files, laid out as an agent lays out a pool
	// task's input directory (agent/cache.go, linkInputs): the files and
	// an empty "chunks". The program reads them every way it can.
	files := map[string]string{"data.csv": "a,b\n1,2\n3,4\n", "notes.txt": "the quick brown fox jumps over the lazy dog\n"}
	dir := filepath.Join(testDir, "input-files")
	if err := os.MkdirAll(filepath.Join(dir, "chunks"), 0o755); err != nil {
		t.Fatal(err)
	}
	hexFiles := map[string]string{}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		hexFiles[name] = hex.EncodeToString([]byte(data))
	}
	seed[0] = 10
	native = append(native, Request{ModulePath: inputs.path, ModuleSHA256: inputs.sha, Stdin: []byte("{}"), Seed: seed, Timeout: time.Minute, InputDir: dir})
	req.Tasks = append(req.Tasks, jsTask{Module: "inputs", Seed: hex.EncodeToString(seed[:]), Stdin: hex.EncodeToString([]byte("{}")), MemoryLimitPages: DefaultMemoryLimitMiB * pagesPerMiB, Inputs: hexFiles})
	// Every trap the profile names, one task each.
	traps := buildTraps(t)
	bin, err := os.ReadFile(traps.path)
	if err != nil {
		t.Fatal(err)
	}
	metered, err := meterModule(bin)
	if err != nil {
		t.Fatal(err)
	}
	req.Modules["traps"] = hex.EncodeToString(metered)
	for _, tc := range trapCases {
		stdin := []byte{tc.stdin}
		native = append(native, Request{ModulePath: traps.path, ModuleSHA256: traps.sha, Stdin: stdin, Timeout: time.Minute})
		req.Tasks = append(req.Tasks, jsTask{Module: "traps", Seed: hex.EncodeToString(make([]byte, 32)), Stdin: hex.EncodeToString(stdin), MemoryLimitPages: DefaultMemoryLimitMiB * pagesPerMiB})
	}
	return req, native
}

var (
	jsNativeOnce sync.Once
	jsNativeOut  []jsOutcome
)

// jsNativeOutcomes returns nativeOutcomes of jsCases' requests, run once
// per test binary for both JavaScript hosts (seconds of wazero's
// interpreter under the race detector).
func jsNativeOutcomes(t *testing.T, reqs []Request) []jsOutcome {
	t.Helper()
	jsNativeOnce.Do(func() { jsNativeOut = nativeOutcomes(t, reqs) })
	if jsNativeOut == nil {
		t.Fatal("the native worker's outcomes could not be made (see the first test that tried)")
	}
	return jsNativeOut
}

// nativeOutcomes runs the requests in the worker's host, as a worker
// process does (TestProfileVectors goes through real worker processes);
// under the race detector in wazero's interpreter, which compiles a Go
// program like pi ten times faster there and answers the same.
func nativeOutcomes(t *testing.T, reqs []Request) []jsOutcome {
	t.Helper()
	h := newTestHost(t, true)
	h.interpreter = raceEnabled
	var out []jsOutcome
	for _, r := range reqs {
		b, _, err := newRunBody(r)
		if err != nil {
			t.Fatal(err)
		}
		res := runInHost(t, h, b)
		o := jsOutcome{Failure: res.Failure, Work: strconv.FormatUint(res.Work, 10)}
		if res.Failure == nil {
			s := hex.EncodeToString(res.Stdout)
			o.Stdout = &s
		}
		if res.Stderr != nil {
			s := hex.EncodeToString(res.Stderr)
			o.Stderr = &s
		}
		out = append(out, o)
	}
	return out
}

// compareOutcomes fails the test where the JavaScript host's outcome of a
// task differs from the native worker's.
func compareOutcomes(t *testing.T, host string, req jsRequest, native, js []jsOutcome) {
	t.Helper()
	if len(js) != len(native) {
		t.Fatalf("%s returned %d outcomes for %d tasks", host, len(js), len(native))
	}
	for i := range native {
		// A trap's trace is each engine's own words, not the outcome.
		for _, o := range []*jsOutcome{&native[i], &js[i]} {
			if o.Failure != nil {
				f := *o.Failure
				f.Trace = ""
				o.Failure = &f
			}
		}
		if diff := cmp.Diff(native[i], js[i]); diff != "" {
			t.Errorf("task %d (%s, stdin %s): %s differs from the native worker (-native +%s):\n%s",
				i, req.Tasks[i].Module, req.Tasks[i].Stdin, host, host, diff)
		}
	}
}

// TestWasiJSNode runs the vectors and pi through web/wasi.js in Node.
func TestWasiJSNode(t *testing.T) {
	nodePath, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node to run web/wasi.js in (Debian: apt-get install nodejs)")
	}
	req, reqs := jsCases(t)
	native := jsNativeOutcomes(t, reqs)
	wasiJS, err := filepath.Abs("../web/wasi.js")
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath, "testdata/vectors/harness.mjs", wasiJS)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node harness.mjs: %v\n%s", err, stderr.Bytes())
	}
	var js []jsOutcome
	if err := json.Unmarshal(out, &js); err != nil {
		t.Fatalf("node harness.mjs printed %q: %v", out, err)
	}
	compareOutcomes(t, "node", req, native, js)
}

// browserPage runs harness.mjs in a module Web Worker and leaves the
// outcomes, as JSON, in window.outcomes (or the error in window.failed).
const browserPage = `<!doctype html>
<meta charset="utf-8">
<title>wasi.js test</title>
<script type="module" src="/page.js"></script>
`

const browserPageJS = `const w = new Worker("/worker.js", { type: "module" });
w.onmessage = (e) => { window.outcomes = e.data; };
w.onerror = (e) => { window.failed = String(e.message); };
`

const browserWorkerJS = `import { runTask } from "/wasi.js";
import { runAll } from "/harness.mjs";
const req = await (await fetch("/request.json")).json();
try {
  postMessage(JSON.stringify(await runAll(runTask, req)));
} catch (e) {
  postMessage(JSON.stringify({ failed: String(e && e.stack || e) }));
}
`

// TestWasiJSBrowser runs the vectors and pi through web/wasi.js in a Web
// Worker of headless Chromium, served from 127.0.0.1 under a strict
// Content-Security-Policy.
func TestWasiJSBrowser(t *testing.T) {
	req, reqs := jsCases(t)
	native := jsNativeOutcomes(t, reqs)
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	harness, err := os.ReadFile("testdata/vectors/harness.mjs")
	if err != nil {
		t.Fatal(err)
	}
	wasiJS, err := fs.ReadFile(web.Files, "wasi.js")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]struct{ typ, body string }{
		"/":             {"text/html; charset=utf-8", browserPage},
		"/page.js":      {"text/javascript", browserPageJS},
		"/worker.js":    {"text/javascript", browserWorkerJS},
		"/wasi.js":      {"text/javascript", string(wasiJS)},
		"/harness.mjs":  {"text/javascript", string(harness)},
		"/request.json": {"application/json", string(body)},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if r.URL.Path == "/favicon.ico" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		// What the coordinator will send with its pages: scripts from
		// the origin only, and WebAssembly compiled from bytes.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'")
		w.Header().Set("Content-Type", f.typ)
		_, _ = w.Write([]byte(f.body))
	}))
	defer srv.Close()

	b := webtest.Start(t, 800, 600)
	ctx, cancel := context.WithTimeout(b.Ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("load the test page: %v", err)
	}
	out, err := chromedp.Run(ctx, chromedp.Poll[string](`window.outcomes || (window.failed && "failed: " + window.failed)`, chromedp.WithPollingTimeout(2*time.Minute)))
	if err != nil {
		t.Fatalf("wait for the outcomes: %v (console: %q)", err, b.Errors())
	}
	var js []jsOutcome
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("the page reported %q: %v (console: %q)", out, err, b.Errors())
	}
	compareOutcomes(t, "browser", req, native, js)
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
