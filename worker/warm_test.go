package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Under the race detector, wazero's optimizing compiler takes 20 to 60 s
// of CPU for a Go-built guest module, ten times what it takes without,
// and the tests' workers are this race-built test binary: each module a
// worker ran was compiled once in the run at that price, a fifth of the
// package's CPU. The compiled code itself is the same either way (it is
// wazero's output, keyed by the module's bytes, wazero's version and the
// CPU's features, not by how the host was built), so a copy of this test
// binary built without the race detector compiles the modules into the
// shared cache first, and the race-built workers load them from there.
// Loading is still done, and checked, by the workers under the race
// detector; only the compiler's own run is spared it.

// warmEnv carries the modules a "warm" child compiles: JSON, a list of
// warmModule.
const warmEnv = "IDLEPOOL_WORKER_TEST_WARM"

// warmModule is a module to compile into the cache, as a worker compiles
// it (metered), or unmetered (plain) as the tests' unmetered hosts do.
type warmModule struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Plain  bool   `json:"plain,omitempty"`
}

func init() { testChildren["warm"] = warmMain }

// warmMain is the "warm" child: it compiles each module of warmEnv into
// the cache of CacheDirEnv, exiting 1 if one does not compile.
func warmMain() int {
	var mods []warmModule
	if err := json.Unmarshal([]byte(os.Getenv(warmEnv)), &mods); err != nil {
		fmt.Fprintln(os.Stderr, "warm:", err)
		return 1
	}
	ctx := context.Background()
	for _, m := range mods {
		h, err := newHost(os.Getenv(CacheDirEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, "warm:", err)
			return 1
		}
		h.unmetered = m.Plain
		// The largest limit: a module's minimum memory never exceeds it,
		// and the limit is not part of the cache's key.
		_, f, err := h.module(ctx, &runBody{ModulePath: m.Path, ModuleSHA256: m.SHA256, MemoryLimitPages: 65536})
		h.close(ctx)
		if err != nil || f != nil {
			fmt.Fprintf(os.Stderr, "warm: %s: %v %v\n", m.Path, err, f)
			return 1
		}
	}
	return 0
}

var (
	warmOnce  sync.Once
	warmExe   string // this package's test binary without the race detector
	warmBuild error  // why it could not be built
)

// warmCache compiles the modules into cacheDir with the test binary built
// without the race detector, building it on the first call. It does
// nothing and returns nil without the race detector, where the workers
// compile as fast themselves. An error (no go tool, a failed build or
// compilation) is returned for the caller to log: the workers then
// compile the modules themselves, more slowly, with the same results.
func warmCache(mods ...warmModule) error {
	if !raceEnabled || len(mods) == 0 {
		return nil
	}
	warmOnce.Do(func() {
		warmExe = filepath.Join(testDir, "warm.test")
		cmd := exec.Command("go", "test", "-c", "-o", warmExe, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			warmBuild = fmt.Errorf("build the test binary without -race: %w\n%s", err, out)
		}
	})
	if warmBuild != nil {
		return warmBuild
	}
	spec, err := json.Marshal(mods)
	if err != nil {
		return err
	}
	cmd := exec.Command(warmExe)
	cmd.Env = append(os.Environ(), childEnv+"=warm", warmEnv+"="+string(spec), CacheDirEnv+"="+cacheDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compile into the cache: %w\n%s", err, out)
	}
	return nil
}
