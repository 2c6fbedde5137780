package worker

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// fakeCUDAEnv, set in a test worker's environment, makes it use fakeCUDA
// instead of the CUDA driver library: "none" for a machine without a
// driver, otherwise a directory in which the fake records the contexts it
// created and destroyed (file PID, "created destroyed") and that it was
// loaded at all (file loaded-PID). Only the test
// binary reads it (setupFakeCUDA, called by TestMain in the worker child).
const fakeCUDAEnv = "IDLEPOOL_WORKER_TEST_FAKE_CUDA"

// setupFakeCUDA replaces the driver loader of this (test worker) process
// as fakeCUDAEnv says.
func setupFakeCUDA() {
	switch dir := os.Getenv(fakeCUDAEnv); dir {
	case "":
	case "none":
		newCUDADriver = func() (CUDADriver, error) {
			return nil, fmt.Errorf("%w: libcuda.so.1: cannot open shared object file (fake)", ErrCUDAUnavailable)
		}
	default:
		newCUDADriver = func() (CUDADriver, error) {
			// Mark that this process loaded a driver at all.
			_ = os.WriteFile(filepath.Join(dir, "loaded-"+strconv.Itoa(os.Getpid())), nil, 0o644)
			return newFakeCUDA(dir), nil
		}
	}
}

// fakeCUDA is a hand-written stand-in for the CUDA driver in tests: not a
// GPU simulator. Devices are fixed descriptions; device memory is byte
// slices at made-up addresses; a "PTX" module is accepted when it has
// ".entry NAME" lines, and its kernels are the Go functions of fakeKernels
// of those names, run at launch on the calling goroutine. Like the real
// driver, a launch that faults is reported by the next Synchronize.
type fakeCUDA struct {
	devices  []CUDADevice
	stateDir string

	created, destroyed int
}

func newFakeCUDA(stateDir string) *fakeCUDA {
	return &fakeCUDA{
		devices:  []CUDADevice{{Name: "Fake GPU", MemoryMiB: 8192, ComputeCapability: "8.9"}},
		stateDir: stateDir,
	}
}

// record writes the context counts for the test to read.
func (f *fakeCUDA) record() {
	path := filepath.Join(f.stateDir, strconv.Itoa(os.Getpid()))
	_ = os.WriteFile(path, fmt.Appendf(nil, "%d %d", f.created, f.destroyed), 0o644)
}

// recordLaunch appends kernel's name to the file launches-PID, for a test
// to see which kernels a task launched.
func (f *fakeCUDA) recordLaunch(kernel string) {
	w, err := os.OpenFile(filepath.Join(f.stateDir, "launches-"+strconv.Itoa(os.Getpid())), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintln(w, kernel)
	_ = w.Close()
}

func (f *fakeCUDA) DeviceCount() (int, error) { return len(f.devices), nil }

func (f *fakeCUDA) Device(ordinal int) (CUDADevice, error) {
	if ordinal < 0 || ordinal >= len(f.devices) {
		return CUDADevice{}, &CUDAError{Func: "cuDeviceGet", Code: 101, Name: "CUDA_ERROR_INVALID_DEVICE"}
	}
	return f.devices[ordinal], nil
}

func (f *fakeCUDA) NewContext(ordinal int) (CUDAContext, error) {
	d, err := f.Device(ordinal)
	if err != nil {
		return nil, err
	}
	f.created++
	f.record()
	return &fakeContext{f: f, memBytes: uint64(d.MemoryMiB) << 20, next: 0x7f0000000000,
		mem: map[uint64][]byte{}, modules: map[uintptr]map[string]bool{}, funcs: map[uintptr]string{}}, nil
}

// fakeContext is a context of fakeCUDA.
type fakeContext struct {
	f         *fakeCUDA
	destroyed bool
	memBytes  uint64
	used      uint64
	next      uint64            // the next device address
	mem       map[uint64][]byte // allocations by base address
	modules   map[uintptr]map[string]bool
	funcs     map[uintptr]string
	handles   uintptr
	pending   error // a faulted launch, reported by Synchronize
}

var ptxEntry = regexp.MustCompile(`(?m)^\s*(?:\.visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)`)

func (c *fakeContext) check(fn string) error {
	if c.destroyed {
		return &CUDAError{Func: fn, Code: 201, Name: "CUDA_ERROR_INVALID_CONTEXT"}
	}
	return nil
}

func (c *fakeContext) LoadModule(ptx []byte) (uintptr, error) {
	if err := c.check("cuModuleLoadDataEx"); err != nil {
		return 0, err
	}
	entries := map[string]bool{}
	for _, m := range ptxEntry.FindAllSubmatch(ptx, -1) {
		entries[string(m[1])] = true
	}
	if len(entries) == 0 {
		return 0, &CUDAError{Func: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX",
			Message: "a PTX JIT compilation failed: ptxas fatal: no .entry in the module (fake)"}
	}
	c.handles++
	c.modules[c.handles] = entries
	return c.handles, nil
}

// ParamSizes answers as a driver before CUDA 12.4 does (nil), except for
// the kernel "driver_disagrees", which it reads as one 8-byte parameter
// whatever its PTX declares.
func (c *fakeContext) ParamSizes(fn uintptr) ([]int, error) {
	if c.funcs[fn] == "driver_disagrees" {
		return []int{8}, nil
	}
	return nil, nil
}

func (c *fakeContext) Function(mod uintptr, name string) (uintptr, error) {
	if err := c.check("cuModuleGetFunction"); err != nil {
		return 0, err
	}
	m, ok := c.modules[mod]
	if !ok {
		return 0, &CUDAError{Func: "cuModuleGetFunction", Code: 400, Name: "CUDA_ERROR_INVALID_HANDLE"}
	}
	if !m[name] {
		return 0, &CUDAError{Func: "cuModuleGetFunction", Code: cudaErrorNotFound, Name: "CUDA_ERROR_NOT_FOUND", Message: "named symbol not found"}
	}
	c.handles++
	c.funcs[c.handles] = name
	return c.handles, nil
}

func (c *fakeContext) Alloc(bytes uint64) (uint64, error) {
	if err := c.check("cuMemAlloc_v2"); err != nil {
		return 0, err
	}
	if bytes > c.memBytes-c.used {
		return 0, &CUDAError{Func: "cuMemAlloc_v2", Code: cudaErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Message: "out of memory"}
	}
	p := c.next
	c.next += (bytes + 255) &^ 255
	c.used += bytes
	c.mem[p] = make([]byte, bytes)
	return p, nil
}

func (c *fakeContext) Free(ptr uint64) error {
	if err := c.check("cuMemFree_v2"); err != nil {
		return err
	}
	b, ok := c.mem[ptr]
	if !ok {
		return &CUDAError{Func: "cuMemFree_v2", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}
	}
	c.used -= uint64(len(b))
	delete(c.mem, ptr)
	return nil
}

// slice returns device memory [ptr, ptr+n) inside one allocation.
func (c *fakeContext) slice(ptr, n uint64) ([]byte, bool) {
	for base, b := range c.mem {
		if ptr >= base && ptr-base <= uint64(len(b)) && n <= uint64(len(b))-(ptr-base) {
			return b[ptr-base : ptr-base+n], true
		}
	}
	return nil, false
}

func (c *fakeContext) CopyHtoD(dst uint64, src []byte) error {
	if err := c.check("cuMemcpyHtoD_v2"); err != nil {
		return err
	}
	d, ok := c.slice(dst, uint64(len(src)))
	if !ok {
		return &CUDAError{Func: "cuMemcpyHtoD_v2", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}
	}
	copy(d, src)
	return nil
}

func (c *fakeContext) CopyDtoH(dst []byte, src uint64) error {
	if err := c.check("cuMemcpyDtoH_v2"); err != nil {
		return err
	}
	s, ok := c.slice(src, uint64(len(dst)))
	if !ok {
		return &CUDAError{Func: "cuMemcpyDtoH_v2", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}
	}
	copy(dst, s)
	return nil
}

// fakeLaunch is what a fake kernel is given: the launch's shape, its
// parameters as the driver passes them (device pointers and scalars in
// 8-byte slots) and the context's device memory.
type fakeLaunch struct {
	grid, block [3]uint32
	params      []uint64
	c           *fakeContext
}

// threads is the number of threads of the launch in x.
func (l fakeLaunch) threads() uint64 { return uint64(l.grid[0]) * uint64(l.block[0]) }

var errIllegalAddress = &CUDAError{Func: "cuCtxSynchronize", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS", Message: "an illegal memory access was encountered"}

// fakeKernels are the kernels fake modules may name.
var fakeKernels = map[string]func(l fakeLaunch) error{
	// add_u32(uint32_t *p, uint32_t n, uint32_t k): p[i] += k for i < n.
	"add_u32": func(l fakeLaunch) error {
		if len(l.params) < 3 {
			return errIllegalAddress
		}
		n, k := uint32(l.params[1]), uint32(l.params[2])
		for i := uint64(0); i < l.threads() && i < uint64(n); i++ {
			b, ok := l.c.slice(l.params[0]+4*i, 4)
			if !ok {
				return errIllegalAddress
			}
			binary.LittleEndian.PutUint32(b, binary.LittleEndian.Uint32(b)+k)
		}
		return nil
	},
	// echo_params(uint64_t *out, ...): out[i] = the raw slot of parameter i.
	"echo_params": func(l fakeLaunch) error {
		if len(l.params) < 1 {
			return errIllegalAddress
		}
		b, ok := l.c.slice(l.params[0], 8*uint64(len(l.params)))
		if !ok {
			return errIllegalAddress
		}
		for i, p := range l.params {
			binary.LittleEndian.PutUint64(b[8*i:], p)
		}
		return nil
	},
	// fault() reads address 0.
	"fault": func(fakeLaunch) error { return errIllegalAddress },
	// The perceptron's kernels (examples/fashion/mlp.cu), emulated with
	// the same arithmetic, thread by thread.
	"mlp_hidden":  fakeMLPHidden,
	"mlp_grad_w1": fakeMLPGradW1,
}

// fakeMLPArgs reads the four buffers and four u32 parameters of
// mlp_hidden and mlp_grad_w1.
func fakeMLPArgs(l fakeLaunch) (ptrs [4]uint64, f, h, first, count uint64, ok bool) {
	if len(l.params) != 8 {
		return ptrs, 0, 0, 0, 0, false
	}
	copy(ptrs[:], l.params[:4])
	return ptrs, uint64(uint32(l.params[4])), uint64(uint32(l.params[5])), uint64(uint32(l.params[6])), uint64(uint32(l.params[7])), true
}

// fakeMLPHidden is mlp_hidden(double *a, const double *w1, const double
// *b1, const u8 *px, u32 features, u32 hidden, u32 first, u32 count):
// thread t < count·hidden writes the pre-activation of unit t % hidden of
// example first + t / hidden.
func fakeMLPHidden(l fakeLaunch) error {
	p, f, h, first, count, ok := fakeMLPArgs(l)
	if !ok {
		return errIllegalAddress
	}
	a, ok1 := l.c.slice(p[0], 8*count*h)
	w1, ok2 := l.c.slice(p[1], 8*f*h)
	b1, ok3 := l.c.slice(p[2], 8*h)
	px, ok4 := l.c.slice(p[3], (first+count)*f)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errIllegalAddress
	}
	f64 := func(b []byte, i uint64) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	for t := uint64(0); t < l.threads() && t < count*h; t++ {
		e, j := t/h, t%h
		acc := f64(b1, j)
		for i := range f {
			v := px[(first+e)*f+i]
			if v == 0 {
				continue
			}
			x := float64(v) / 255
			acc = acc + float64(f64(w1, i*h+j)*x)
		}
		binary.LittleEndian.PutUint64(a[8*t:], math.Float64bits(acc))
	}
	return nil
}

// fakeMLPGradW1 is mlp_grad_w1(i64 *g, u32 *overflow, const u8 *px,
// const i64 *dh, u32 features, u32 hidden, u32 first, u32 count): thread
// t < features·hidden adds pixel t / hidden times error t % hidden of each
// example to g[t], in order, refusing a sum that overflows.
func fakeMLPGradW1(l fakeLaunch) error {
	p, f, h, first, count, ok := fakeMLPArgs(l)
	if !ok {
		return errIllegalAddress
	}
	g, ok1 := l.c.slice(p[0], 8*f*h)
	over, ok2 := l.c.slice(p[1], 4)
	px, ok3 := l.c.slice(p[2], (first+count)*f)
	dh, ok4 := l.c.slice(p[3], 8*count*h)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errIllegalAddress
	}
	for t := uint64(0); t < l.threads() && t < f*h; t++ {
		i, j := t/h, t%h
		s := int64(binary.LittleEndian.Uint64(g[8*t:]))
		for e := range count {
			v := int64(px[(first+e)*f+i])
			d := int64(binary.LittleEndian.Uint64(dh[8*(e*h+j):]))
			if v == 0 || d == 0 {
				continue
			}
			q := v * d
			if n := s + q; (q > 0 && n < s) || (q < 0 && n > s) {
				binary.LittleEndian.PutUint32(over, 1)
			} else {
				s = n
			}
		}
		binary.LittleEndian.PutUint64(g[8*t:], uint64(s))
	}
	return nil
}

func (c *fakeContext) Launch(fn uintptr, grid, block [3]uint32, sharedBytes uint32, params []uint64) error {
	if err := c.check("cuLaunchKernel"); err != nil {
		return err
	}
	name, ok := c.funcs[fn]
	if !ok {
		return &CUDAError{Func: "cuLaunchKernel", Code: 400, Name: "CUDA_ERROR_INVALID_HANDLE"}
	}
	k, ok := fakeKernels[name]
	c.f.recordLaunch(name)
	if !ok {
		return &CUDAError{Func: "cuLaunchKernel", Code: 98, Name: "CUDA_ERROR_INVALID_SOURCE", Message: "no fake kernel " + strings.TrimSpace(name)}
	}
	if err := k(fakeLaunch{grid: grid, block: block, params: params, c: c}); err != nil && c.pending == nil {
		c.pending = err
	}
	return nil
}

func (c *fakeContext) Synchronize() error {
	if err := c.check("cuCtxSynchronize"); err != nil {
		return err
	}
	err := c.pending
	c.pending = nil
	if err != nil {
		return err
	}
	return nil
}

func (c *fakeContext) Destroy() error {
	if err := c.check("cuCtxDestroy_v2"); err != nil {
		return err
	}
	c.destroyed = true
	c.mem = nil
	c.f.destroyed++
	c.f.record()
	return nil
}

var _ CUDADriver = (*fakeCUDA)(nil)
