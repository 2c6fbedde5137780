package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Reactors: job programs whose runtime starts once per worker.
//
// A command (a module that exports _start) starts from nothing in every
// task: for a Go-built program that is the Go runtime initialising itself
// (its heap, its scheduler, every package's init), most of a task's
// start-up. A reactor is the second program form: a module that exports
// _initialize and ReactorTaskExport, both without parameters and results,
// and no _start (Go: GOOS=wasip1 go build -buildmode=c-shared with a
// //go:wasmexport idlepool_task function; docs/author.md). The worker runs
// its _initialize once, in an instance of its own with a fixed
// environment (reactorInit), saves the state it leaves (the linear memory
// and the mutable globals) and starts every task from a fresh instance
// into which that state is copied, then calls ReactorTaskExport. So every
// task still starts from identical bytes, nothing of one task reaches the
// next, and what a task computes is exactly what it computes in a fresh
// instance that ran _initialize in that environment and then the task
// (TestReactorSnapshotSameAsFresh):
//
//   - during _initialize the program sees args [ProgramName], no
//     environment, an empty stdin, a random source that is ChaCha8 with
//     an all-zero key (not the task's seed), the fake clocks every task
//     sees, no GPU, and, where the task has an input directory, an empty
//     one at InputMountPath (Go's runtime learns the preopened directories
//     while it initialises); what it writes to stdout and stderr is
//     dropped, and the work it does is not counted;
//   - the task then reads its task from stdin, draws from ChaCha8 of its
//     seed and reads the clocks where _initialize left them.
//
// A _initialize that fails (a trap, an exit) fails every task of the
// program the same way. A reactor's mutable globals must be numbers (i32,
// i64, f32, f64): a reference or vector cannot be carried into another
// instance, and such a module is refused.

// ReactorInitExport and ReactorTaskExport are the functions a reactor
// exports: the runtime's initialisation, run once per worker, and one
// task, run in a copy of the state the first left.
const (
	ReactorInitExport = "_initialize"
	ReactorTaskExport = "idlepool_task"
)

// reactorGlobalPrefix names the exports under which the worker exports a
// reactor's own mutable globals (the prefix and the global's index) to
// save and restore them. A module that already exports such a name is
// refused.
const reactorGlobalPrefix = "__idlepool_global_"

// fakeEpochNanos is the first reading of wazero's fake wall clock
// (2022-01-01 UTC), which commands see; reactors see the same clocks.
const fakeEpochNanos = 1640995200000000000

// reactorGlobals rewrites bin, when it is a reactor (it exports
// _initialize and ReactorTaskExport and no _start), so that it also
// exports each of its own mutable globals as reactorGlobalPrefix+index,
// and returns those names. A command comes back as it is, with no names.
func reactorGlobals(bin []byte) ([]byte, []string, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return bin, nil, nil // the compiler says what is wrong
	}
	type section struct {
		id      byte
		at, end int // the section's header and end offsets in bin
		content []byte
		start   int
	}
	var sections []section
	r := &reader{b: bin, off: 8}
	for r.off < len(bin) {
		at := r.off
		id, err := r.byte()
		if err != nil {
			return nil, nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, nil, err
		}
		start := r.off
		content, err := r.bytes(int(size))
		if err != nil {
			return nil, nil, err
		}
		sections = append(sections, section{id: id, at: at, end: r.off, content: content, start: start})
	}
	var imported uint32
	var mutable []uint32 // indices of the module's own mutable globals
	exportAt := -1
	var exports []byte
	funcExports := map[string]bool{}
	for i, s := range sections {
		var err error
		switch s.id {
		case secImport:
			imported, err = countImportedGlobals(s.content, s.start)
		case secGlobal:
			mutable, err = mutableGlobals(s.content, s.start, imported)
		case secExport:
			exportAt, exports = i, s.content
			err = readExports(s.content, s.start, funcExports)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if !funcExports[ReactorInitExport] || !funcExports[ReactorTaskExport] || funcExports["_start"] {
		return bin, nil, nil
	}
	n, _ := (&reader{b: exports}).u32() // read by readExports
	c := appendU32(nil, n+uint32(len(mutable)))
	c = append(c, exports[lebLen(exports):]...)
	names := make([]string, len(mutable))
	for i, g := range mutable {
		names[i] = reactorGlobalPrefix + strconv.FormatUint(uint64(g), 10)
		c = appendU32(c, uint32(len(names[i])))
		c = append(c, names[i]...)
		c = append(c, 0x03) // global
		c = appendU32(c, g)
	}
	s := sections[exportAt]
	out := make([]byte, 0, len(bin)+len(c)-len(s.content))
	out = append(out, bin[:s.at]...)
	out = append(out, secExport)
	out = appendU32(out, uint32(len(c)))
	out = append(out, c...)
	return append(out, bin[s.end:]...), names, nil
}

// mutableGlobals returns the indices of the mutable globals of a global
// section whose content starts at offset base, the module having
// imported globals before them. A mutable global that is not a number is
// an error.
func mutableGlobals(content []byte, base int, imported uint32) ([]uint32, error) {
	r := &reader{b: content, base: base}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for i := range n {
		at := r.pos()
		typ, err := r.byte()
		if err != nil {
			return nil, err
		}
		mut, err := r.byte()
		if err != nil {
			return nil, err
		}
		if mut == 1 {
			switch typ {
			case 0x7F, 0x7E, 0x7D, 0x7C: // i32, i64, f32, f64
				out = append(out, imported+i)
			default:
				return nil, fmt.Errorf("reactor: mutable global %d (offset %d) has type 0x%02x: only numbers can be carried from _initialize into a task", imported+i, at, typ)
			}
		}
		if err := skipConstExpr(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// skipConstExpr skips a constant expression up to its end (0x0B).
func skipConstExpr(r *reader) error {
	for {
		at := r.pos()
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0B: // end
			return nil
		case 0x41, 0x23, 0xD2: // i32.const, global.get, ref.func
			err = r.skipLEB(5)
		case 0x42: // i64.const
			err = r.skipLEB(10)
		case 0x43: // f32.const
			_, err = r.bytes(4)
		case 0x44: // f64.const
			_, err = r.bytes(8)
		case 0xD0: // ref.null t
			_, err = r.byte()
		case 0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E: // extended constant arithmetic
		case 0xFD: // v128.const
			var sub uint32
			if sub, err = r.u32(); err == nil && sub != 12 {
				err = fmt.Errorf("reactor: opcode 0xfd %d in a constant expression at offset %d", sub, at)
			}
			if err == nil {
				_, err = r.bytes(16)
			}
		default:
			return fmt.Errorf("reactor: opcode 0x%02x in a constant expression at offset %d", op, at)
		}
		if err != nil {
			return err
		}
	}
}

// readExports records the names of the functions an export section
// exports in funcs, and refuses names under reactorGlobalPrefix.
func readExports(content []byte, base int, funcs map[string]bool) error {
	return eachExport(content, base, "reactor", func(name string, kind byte, at int) error {
		if strings.HasPrefix(name, reactorGlobalPrefix) {
			return fmt.Errorf("reactor: the module exports %q (offset %d), a name the worker reserves", name, at)
		}
		if kind == 0x00 {
			funcs[name] = true
		}
		return nil
	})
}

// reactorPhase is where a reactor instance is: in _initialize (task
// false) or in the task, and how often it has read each fake clock.
// Its readers and writers send the guest's stdio and random reads to
// the phase's own.
type reactorPhase struct {
	task                 bool
	nanoReads, wallReads int64
}

// nanotime is wazero's fake monotonic clock: 0 at the first reading,
// one millisecond more at each.
func (p *reactorPhase) nanotime() int64 {
	v := p.nanoReads * int64(time.Millisecond)
	p.nanoReads++
	return v
}

// walltime is wazero's fake wall clock: fakeEpochNanos at the first
// reading, one millisecond more at each.
func (p *reactorPhase) walltime() (int64, int32) {
	t := fakeEpochNanos + p.wallReads*int64(time.Millisecond)
	p.wallReads++
	return t / 1e9, int32(t % 1e9)
}

type phasedReader struct {
	phase      *reactorPhase
	init, task io.Reader
}

func (r *phasedReader) Read(b []byte) (int, error) {
	if r.phase.task {
		return r.task.Read(b)
	}
	return r.init.Read(b)
}

type phasedWriter struct {
	phase      *reactorPhase
	init, task io.Writer
}

func (w *phasedWriter) Write(b []byte) (int, error) {
	if w.phase.task {
		return w.task.Write(b)
	}
	return w.init.Write(b)
}

// reactorInit is what _initialize sees and writes: its sinks, dropped
// after, and its random source.
type reactorInit struct {
	stdout *stdoutBuffer
	stderr *stderrBuffer
	rand   io.Reader
}

// maxInitOutput bounds what _initialize may write to stdout; more fails
// it with output-too-large, on every device alike.
const maxInitOutput = 64 << 10

func newReactorInit() *reactorInit {
	return &reactorInit{stdout: &stdoutBuffer{max: maxInitOutput}, stderr: newStderrBuffer(DefaultMaxStderrBytes), rand: rand.NewChaCha8([32]byte{})}
}

// reactorConfig turns a task's module configuration into a reactor's:
// stdio and random source through phase, phase's clocks.
func reactorConfig(cfg wazero.ModuleConfig, phase *reactorPhase, in *reactorInit, stdin io.Reader, stdout, stderr io.Writer, random io.Reader) wazero.ModuleConfig {
	return cfg.
		WithStdin(&phasedReader{phase: phase, init: bytes.NewReader(nil), task: stdin}).
		WithStdout(&phasedWriter{phase: phase, init: in.stdout, task: stdout}).
		WithStderr(&phasedWriter{phase: phase, init: in.stderr, task: stderr}).
		WithRandSource(&phasedReader{phase: phase, init: in.rand, task: random}).
		WithNanotime(phase.nanotime, sys.ClockResolution(ProfileMonotonicResolutionNanos)).
		WithWalltime(phase.walltime, sys.ClockResolution(ProfileRealtimeResolutionNanos))
}

// reactorSnapshot is the state a reactor's _initialize left, in the
// environment of reactorInit: the linear memory (its size and every page
// that differs from a fresh instance's: wazero's instantiation already
// writes the data segments), the mutable globals and the clocks'
// readings.
// failure is set instead when _initialize failed.
type reactorSnapshot struct {
	failure *Failure
	stderr  []byte // _initialize's, kept for a failure
	work    uint64 // _initialize's count, kept for a failure
	pages   uint32
	chunks  []memoryChunk
	globals []uint64 // in the order of hostModule.reactor
	phase   reactorPhase
}

// memoryChunk is a run of pages of a snapshot's memory at offset off.
type memoryChunk struct {
	off  uint32
	data []byte
}

const wasmPage = 1 << 16

// initReactor runs _initialize in mod, which was instantiated with
// reactorConfig in phase's init phase, and returns the failure that
// fails every task if it failed.
func initReactor(ctx context.Context, mod api.Module, in *reactorInit) (*Failure, uint64) {
	_, callErr := mod.ExportedFunction(ReactorInitExport).Call(ctx)
	var work uint64
	if g := mod.ExportedGlobal(MeterExport); g != nil {
		work = g.Get()
	}
	in.stderr.finish()
	f := classify(callErr, in.stdout, in.stderr)
	switch {
	case f != nil:
		f.Message = ReactorInitExport + ": " + f.Message
	case callErr != nil: // exit status 0
		f = &Failure{Kind: FailureExitStatus, Message: ReactorInitExport + " exited with status 0; a reactor's " + ReactorInitExport + " must return"}
	}
	return f, work
}

// snapshot runs m's _initialize once in the environment of reactorInit
// and saves what it leaves. input says whether the tasks it serves have
// an input directory (and _initialize an empty one in its place).
func (h *host) snapshot(ctx context.Context, rt wazero.Runtime, m *hostModule, input bool) *reactorSnapshot {
	phase := &reactorPhase{}
	in := newReactorInit()
	cfg := wazero.NewModuleConfig().WithName("").WithArgs(ProgramName).WithStartFunctions()
	if input {
		cfg = withInputMount(cfg, emptyDir{})
	}
	cfg = reactorConfig(cfg, phase, in, bytes.NewReader(nil), io.Discard, io.Discard, bytes.NewReader(nil))
	memCtx, memDone := h.mem.forTask(ctx)
	defer memDone()
	mod, err := rt.InstantiateModule(memCtx, m.compiled, cfg)
	if err != nil {
		return &reactorSnapshot{failure: &Failure{Kind: FailureBadModule, Message: "instantiate: " + clip(err.Error())}}
	}
	defer mod.Close(ctx)
	mem := moduleMemory(mod)
	var fresh []byte // a fresh instance's memory
	if mem != nil {
		b, _ := mem.Read(0, mem.Size())
		fresh = bytes.Clone(b)
	}
	gpu := newCUDATask(&h.cuda, 0, 0)
	f, work := initReactor(withCUDATask(ctx, gpu), mod, in)
	if _, err := gpu.end(); err != nil {
		h.broken = fmt.Errorf("destroy the CUDA context of %s: %w", ReactorInitExport, err)
	}
	if f != nil {
		return &reactorSnapshot{failure: f, stderr: in.stderr.bytes(), work: work}
	}
	s := &reactorSnapshot{phase: *phase}
	if mem != nil {
		b, _ := mem.Read(0, mem.Size())
		s.pages = uint32(len(b) / wasmPage)
		for p := 0; p < len(b)/wasmPage; p++ {
			page := b[p*wasmPage : (p+1)*wasmPage]
			if (p+1)*wasmPage <= len(fresh) && bytes.Equal(page, fresh[p*wasmPage:(p+1)*wasmPage]) ||
				p*wasmPage >= len(fresh) && allZero(page) {
				continue // as a fresh instance has it (beyond its size: zero)
			}
			if n := len(s.chunks); n > 0 && int(s.chunks[n-1].off)+len(s.chunks[n-1].data) == p*wasmPage {
				s.chunks[n-1].data = append(s.chunks[n-1].data, page...)
			} else {
				s.chunks = append(s.chunks, memoryChunk{off: uint32(p * wasmPage), data: bytes.Clone(page)})
			}
		}
	}
	for _, name := range m.reactor {
		s.globals = append(s.globals, mod.ExportedGlobal(name).Get())
	}
	return s
}

// restore copies s into mod, a fresh instance of the module s was taken
// from, and sets its work counter to zero.
func (s *reactorSnapshot) restore(mod api.Module, names []string) error {
	if mem := moduleMemory(mod); mem != nil {
		if have := mem.Size() / wasmPage; have < s.pages {
			if _, ok := mem.Grow(s.pages - have); !ok {
				return fmt.Errorf("grow the memory to the %d pages %s left", s.pages, ReactorInitExport)
			}
		}
		for _, c := range s.chunks {
			if !mem.Write(c.off, c.data) {
				return fmt.Errorf("restore %d bytes at %d", len(c.data), c.off)
			}
		}
	}
	for i, name := range names {
		g, ok := mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("global %s is not mutable", name)
		}
		g.Set(s.globals[i])
	}
	if g, ok := mod.ExportedGlobal(MeterExport).(api.MutableGlobal); ok {
		g.Set(0)
	}
	return nil
}

// moduleMemory is mod's linear memory, nil when it has none (wazero
// returns a nil pointer in the interface then).
func moduleMemory(mod api.Module) api.Memory {
	mem := mod.Memory()
	if mem == nil || reflect.ValueOf(mem).IsNil() {
		return nil
	}
	return mem
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// emptyDir is an empty directory: what _initialize finds at
// InputMountPath.
type emptyDir struct{}

func (emptyDir) Open(name string) (fs.File, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return emptyDirFile{}, nil
}

type emptyDirFile struct{}

func (emptyDirFile) Stat() (fs.FileInfo, error) { return emptyDirInfo{}, nil }
func (emptyDirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}
func (emptyDirFile) Close() error                       { return nil }
func (emptyDirFile) ReadDir(int) ([]fs.DirEntry, error) { return nil, nil }
func (emptyDirInfo) Name() string                       { return "." }
func (emptyDirInfo) Size() int64                        { return 0 }
func (emptyDirInfo) Mode() fs.FileMode                  { return fs.ModeDir | 0o555 }
func (emptyDirInfo) ModTime() time.Time                 { return time.Unix(0, 0) }
func (emptyDirInfo) IsDir() bool                        { return true }
func (emptyDirInfo) Sys() any                           { return nil }

type emptyDirInfo struct{}
