package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A result over the stdout limit fails with the setting that raises it
// named, and the manifest's policy.stdout_mib raises it.
func TestRunStdoutLimit(t *testing.T) {
	manifest := func(stdoutMiB int) string {
		return writeManifest(t, "big", fmt.Sprintf(`name = "big"
program = "prog.wasm"
[split]
rule = "range"
tasks = 2
[split.params]
bytes = %d
[[merge]]
field = "n"
rule = "sum"
[policy]
stdout_mib = %d
`, 3<<19, stdoutMiB)) // 1.5 MiB of padding
	}
	out := idlepool(t, t.TempDir(), "run", manifest(1), "--workers", "1")
	if out.code != 1 || !strings.Contains(out.stderr, "larger than the 1 MiB stdout limit; raise policy.stdout_mib, at most 64") {
		t.Errorf("a 1.5 MiB result under stdout_mib = 1: exit %d, stderr:\n%s\nwant exit 1 naming policy.stdout_mib", out.code, out.stderr)
	}
	r, _ := runJSON(t, t.TempDir(), manifest(2))
	var n struct{ Sum int64 }
	if err := json.Unmarshal(r.Result["n"], &n); err != nil || r.Tasks.OK != 2 || n.Sum != 2*(3<<19) {
		t.Errorf("under stdout_mib = 2: %d tasks ok, n = %s; want 2 and a sum of %d", r.Tasks.OK, r.Result["n"], 2*(3<<19))
	}
}
