package worker

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// The determinism profile: what every host returns to a task's program for
// the WASI calls whose answer a runtime could choose (docs/determinism.md
// has the whole profile, call by call, and testdata/vectors its test
// vectors). The worker sets each of these itself instead of leaving them
// to wazero's defaults, so that a new wazero cannot change a task's bytes
// unnoticed; web/wasi.js implements the same profile for browsers. The
// values are wazero v1.12's defaults, which every task computed so far
// has seen, so no job's results change.
const (
	// ProfileVersion is the version of the determinism profile the worker
	// follows.
	ProfileVersion = 2
	// ProfileEpochNanos is the first reading of the realtime clock:
	// 2022-01-01T00:00:00Z in nanoseconds since the Unix epoch.
	ProfileEpochNanos = 1_640_995_200_000_000_000
	// ProfileTickNanos is how far each clock advances per reading (1 ms).
	ProfileTickNanos = 1_000_000
	// ProfileRealtimeResolutionNanos is clock_res_get's answer for the
	// realtime clock (1 µs).
	ProfileRealtimeResolutionNanos = 1_000
	// ProfileMonotonicResolutionNanos is clock_res_get's answer for the
	// monotonic clock (1 ns).
	ProfileMonotonicResolutionNanos = 1
)

// profileClocks are one task's clocks: the n-th reading (from 0) of the
// realtime clock is ProfileEpochNanos + n*ProfileTickNanos, of the
// monotonic clock n*ProfileTickNanos, each counted on its own. Sleeping
// (poll_oneoff) advances neither. Not safe for concurrent use; a task's
// guest calls them from one goroutine.
type profileClocks struct {
	wall, mono int64 // readings taken
}

func (c *profileClocks) walltime() (sec int64, nsec int32) {
	t := ProfileEpochNanos + c.wall*ProfileTickNanos
	c.wall++
	return t / 1e9, int32(t % 1e9)
}

func (c *profileClocks) nanotime() int64 {
	t := c.mono * ProfileTickNanos
	c.mono++
	return t
}

// profileRand returns a task's random source: the ChaCha8 stream of
// math/rand/v2 seeded with the task's seed, read in order by every
// random_get (Go's ChaCha8.Read: little-endian uint64s, a partly used one
// finished by the next read).
func profileRand(seed [32]byte) io.Reader { return rand.NewChaCha8(seed) }

// withProfile sets the profile's random source, clocks, sleep and yield on
// a task's module configuration.
func withProfile(cfg wazero.ModuleConfig, seed [32]byte) wazero.ModuleConfig {
	clocks := &profileClocks{}
	return cfg.
		WithRandSource(profileRand(seed)).
		WithWalltime(clocks.walltime, sys.ClockResolution(ProfileRealtimeResolutionNanos)).
		WithNanotime(clocks.nanotime, sys.ClockResolution(ProfileMonotonicResolutionNanos)).
		WithNanosleep(func(int64) {}). // sleeping returns at once
		WithOsyield(func() {})         // sched_yield does nothing
}

// errnoNosys is WASI's ENOSYS, "function not supported".
const errnoNosys = 52

// instantiateWASI instantiates wasi_snapshot_preview1 in rt: wazero's
// functions, except where the profile answers otherwise.
//
// fd_filestat_set_times on stdin, stdout or stderr answers ENOSYS, the
// answer of those files' own Utimens: wazero v1.12 then asks the file's
// file system, which stdio files lack, and crashes; the task trapped with
// a message holding machine addresses, which no two devices reproduce.
func instantiateWASI(ctx context.Context, rt wazero.Runtime) error {
	// wazero's implementation of the function, from a module compiled
	// only to read it.
	probe := rt.NewHostModuleBuilder("idlepool_wasi_probe")
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(probe)
	compiled, err := probe.Compile(ctx)
	if err != nil {
		return fmt.Errorf("compile WASI: %w", err)
	}
	def := compiled.ExportedFunctions()["fd_filestat_set_times"]
	_ = compiled.Close(ctx)
	orig, ok := def.GoFunction().(api.GoModuleFunction)
	if def == nil || !ok {
		return fmt.Errorf("instantiate WASI: wazero's fd_filestat_set_times is not a Go function")
	}
	b := rt.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			defer func() {
				// Only the stdio files' missing file system gets here:
				// the function's other paths return an errno.
				if r := recover(); r != nil {
					stack[0] = errnoNosys
				}
			}()
			orig.Call(ctx, mod, stack)
		}), def.ParamTypes(), def.ResultTypes()).
		WithParameterNames(def.ParamNames()...).
		Export("fd_filestat_set_times")
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("instantiate WASI: %w", err)
	}
	return nil
}
