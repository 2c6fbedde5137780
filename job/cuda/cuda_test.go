package cuda

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEncodeArgs(t *testing.T) {
	buf := &Buffer{handle: 7, size: 64}
	tests := []struct {
		name string
		args []Arg
		want string // hex of the records
	}{
		{name: "none", args: nil, want: ""},
		{
			name: "buffer handle",
			args: []Arg{BufferArg(buf)},
			want: "00000000" + "00000000" + "0700000000000000",
		},
		{
			name: "u32",
			args: []Arg{U32(0xdeadbeef)},
			want: "01000000" + "00000000" + "efbeadde00000000",
		},
		{
			name: "negative int32 keeps its 32 bits",
			args: []Arg{U32(uint32(0xffffffff))},
			want: "01000000" + "00000000" + "ffffffff00000000",
		},
		{
			name: "u64",
			args: []Arg{U64(0x0102030405060708)},
			want: "02000000" + "00000000" + "0807060504030201",
		},
		{
			name: "f32 1.5",
			args: []Arg{F32(1.5)}, // 0x3fc00000
			want: "03000000" + "00000000" + "0000c03f00000000",
		},
		{
			name: "f64 -2",
			args: []Arg{F64(-2)}, // 0xc000000000000000
			want: "04000000" + "00000000" + "00000000000000c0",
		},
		{
			name: "several in order",
			args: []Arg{BufferArg(buf), U64(1), F32(0)},
			want: "00000000000000000700000000000000" +
				"02000000000000000100000000000000" +
				"03000000000000000000000000000000",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeArgs("launch k", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 16*len(tc.args) {
				t.Errorf("%d bytes for %d parameters, want 16 each", len(got), len(tc.args))
			}
			if diff := cmp.Diff(tc.want, hex.EncodeToString(got)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeArgsRejects(t *testing.T) {
	freed := &Buffer{handle: 3, size: 8, freed: true}
	tests := []struct {
		name string
		args []Arg
		want error
	}{
		{name: "65 parameters", args: make([]Arg, 65), want: ErrInvalidArgument},
		{name: "nil buffer", args: []Arg{BufferArg(nil)}, want: ErrInvalidHandle},
		{name: "freed buffer", args: []Arg{U32(1), BufferArg(freed)}, want: ErrInvalidHandle},
		{name: "unknown kind", args: []Arg{{kind: 9}}, want: ErrInvalidArgument},
		{name: "zero Arg", args: []Arg{{}}, want: ErrInvalidHandle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := encodeArgs("launch k", tc.args)
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
	most := make([]Arg, 64)
	for i := range most {
		most[i] = U32(uint32(i))
	}
	if _, err := encodeArgs("launch k", most); err != nil {
		t.Errorf("64 parameters (the most allowed): %v", err)
	}
}

func TestErrorMapping(t *testing.T) {
	all := []error{ErrNoDevice, ErrInvalidArgument, ErrOutOfBounds, ErrInvalidHandle, ErrOutOfMemory,
		ErrModuleLoad, ErrNotFound, ErrLaunch, ErrDriver, ErrLimit}
	for i, want := range all {
		code := int32(-1 - i)
		err := error(&Error{Code: code, Op: "launch k", Message: "the driver's words"})
		for _, other := range all {
			if got := errors.Is(err, other); got != (other == want) {
				t.Errorf("code %d: errors.Is(err, %v) = %v", code, other, got)
			}
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != code {
			t.Errorf("code %d: errors.As gives %+v", code, e)
		}
	}
	if err := (&Error{Code: -42, Op: "x"}); !errors.Is(err, ErrDriver) {
		t.Errorf("unknown code -42: %v is not ErrDriver", err)
	}
	if err := (&Error{Code: 0}); err.Unwrap() != nil {
		t.Errorf("code 0 unwraps to %v, want nil", err.Unwrap())
	}
	got := (&Error{Code: -8, Op: "launch count_inside", Message: "an illegal memory access was encountered"}).Error()
	want := "cuda: launch count_inside: launch failed (code -8): an illegal memory access was encountered"
	if got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestNoDevice(t *testing.T) {
	// The package as built for this platform (not wasip1): no device.
	if n := Devices(); n != 0 {
		t.Fatalf("Devices() = %d outside WebAssembly, want 0", n)
	}
	_, err := Info(0)
	mustNoDevice(t, "Info", err)
	_, err = LoadModule([]byte(".version 7.0\n"))
	mustNoDevice(t, "LoadModule", err)
	_, err = Alloc(1024)
	mustNoDevice(t, "Alloc", err)
	mustNoDevice(t, "Synchronize", Synchronize())
	var e *Error
	if errors.As(err, &e); e == nil || !strings.Contains(e.Message, "GOOS=wasip1") {
		t.Errorf("message %q does not say how to get a device", e.Message)
	}
}

func mustNoDevice(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("%s: error %v, want ErrNoDevice", what, err)
	}
}

// fakeHost is a host module with one device that records what it is
// asked: buffers are byte slices, kernels do nothing.
type fakeHost struct {
	info     string
	buffers  map[int32][]byte
	next     int32
	launches []fakeLaunch
	last     string
	calls    int
}

type fakeLaunch struct {
	function    int32
	grid, block Dim3
	shared      uint32
	params      string // hex
	count       int32
}

func newFakeHost(t *testing.T) *fakeHost {
	f := &fakeHost{
		info:    `{"name":"NVIDIA H200","memory_mib":143771,"compute_capability":"9.0","memory_cap_mib":4096}`,
		buffers: map[int32][]byte{},
		next:    1,
	}
	old := hostModule
	hostModule = f
	t.Cleanup(func() { hostModule = old })
	return f
}

func (f *fakeHost) fail(code int32, msg string) int32 { f.last = msg; return code }

func (f *fakeHost) deviceCount() int32 { f.calls++; return 1 }

func (f *fakeHost) deviceInfo(ordinal int32, out []byte) int32 {
	f.calls++
	if ordinal != 0 {
		return f.fail(codeNoDevice, "ordinal out of range")
	}
	if len(out) < len(f.info) {
		return f.fail(codeInvalidArgument, "out too small")
	}
	return int32(copy(out, f.info))
}

func (f *fakeHost) moduleLoad(ptx []byte) int32 {
	f.calls++
	if !strings.Contains(string(ptx), ".entry") {
		return f.fail(codeModuleLoad, "ptx has no entry")
	}
	return 1
}

func (f *fakeHost) functionGet(module int32, name []byte) int32 {
	f.calls++
	if module != 1 {
		return f.fail(codeInvalidHandle, "no such module")
	}
	if string(name) != "k" {
		return f.fail(codeNotFound, "named symbol not found")
	}
	return 5
}

func (f *fakeHost) memAlloc(bytes int64) int32 {
	f.calls++
	if bytes > 4096<<20 {
		return f.fail(codeOutOfMemory, "past the cap")
	}
	h := f.next
	f.next++
	f.buffers[h] = make([]byte, bytes)
	return h
}

func (f *fakeHost) memFree(buffer int32) int32 {
	f.calls++
	if _, ok := f.buffers[buffer]; !ok {
		return f.fail(codeInvalidHandle, "no such buffer")
	}
	delete(f.buffers, buffer)
	return 0
}

func (f *fakeHost) memcpyHtoD(buffer int32, offset int64, src []byte) int32 {
	f.calls++
	copy(f.buffers[buffer][offset:], src)
	return 0
}

func (f *fakeHost) memcpyDtoH(dst []byte, buffer int32, offset int64) int32 {
	f.calls++
	copy(dst, f.buffers[buffer][offset:])
	return 0
}

func (f *fakeHost) launch(function int32, grid, block Dim3, shared uint32, params []byte, count int32) int32 {
	f.calls++
	f.launches = append(f.launches, fakeLaunch{function: function, grid: grid, block: block, shared: shared,
		params: hex.EncodeToString(params), count: count})
	return 0
}

func (f *fakeHost) synchronize() int32 { f.calls++; return 0 }

func (f *fakeHost) lastError(out []byte) int32 { return int32(copy(out, f.last)) }

func TestWithDevice(t *testing.T) {
	f := newFakeHost(t)
	if n := Devices(); n != 1 {
		t.Fatalf("Devices() = %d, want 1", n)
	}
	info, err := Info(0)
	if err != nil {
		t.Fatal(err)
	}
	want := DeviceInfo{Name: "NVIDIA H200", MemoryMiB: 143771, ComputeCapability: "9.0", MemoryCapMiB: 4096}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("Info (-want +got):\n%s", diff)
	}
	if _, err := Info(1); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Info(1): %v, want ErrNoDevice", err)
	}

	if _, err := LoadModule([]byte(".version 7.0")); !errors.Is(err, ErrModuleLoad) {
		t.Errorf("LoadModule without entry: %v, want ErrModuleLoad", err)
	} else if !strings.Contains(err.Error(), "ptx has no entry") {
		t.Errorf("error %q lacks the host's last_error message", err)
	}
	m, err := LoadModule([]byte(".entry k()"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Function("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Function(nope): %v, want ErrNotFound", err)
	}
	k, err := m.Function("k")
	if err != nil {
		t.Fatal(err)
	}

	b, err := Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(0, []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if err := b.Read(10, got); err != nil || string(got) != "abcdef" {
		t.Errorf("Read(10) = %q, %v; want abcdef", got, err)
	}
	calls := f.calls
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"write past the end", b.Write(10, make([]byte, 7))},
		{"read past the end", b.Read(0, make([]byte, 17))},
		{"negative offset", b.Read(-1, make([]byte, 1))},
	} {
		if !errors.Is(tc.err, ErrOutOfBounds) {
			t.Errorf("%s: %v, want ErrOutOfBounds", tc.name, tc.err)
		}
	}
	if f.calls != calls {
		t.Errorf("out-of-bounds copies reached the host (%d calls)", f.calls-calls)
	}
	if _, err := Alloc(0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Alloc(0): %v, want ErrInvalidArgument", err)
	}
	if _, err := Alloc(8 << 30); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Alloc(8 GiB): %v, want ErrOutOfMemory", err)
	}

	grid, block := Dim3{X: 40, Y: 1, Z: 1}, Dim3{X: 256, Y: 1, Z: 1}
	if err := k.Launch(grid, block, 128, BufferArg(b), U32(3), F64(1)); err != nil {
		t.Fatal(err)
	}
	if err := k.Launch(Dim3{X: 1}, block, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("launch with grid Y = 0: %v, want ErrInvalidArgument", err)
	}
	if err := Synchronize(); err != nil {
		t.Fatal(err)
	}
	wantLaunch := []fakeLaunch{{function: 5, grid: grid, block: block, shared: 128, count: 3,
		params: "00000000000000000100000000000000" +
			"01000000000000000300000000000000" +
			"0400000000000000000000000000f03f"}}
	if diff := cmp.Diff(wantLaunch, f.launches, cmp.AllowUnexported(fakeLaunch{})); diff != "" {
		t.Errorf("launches (-want +got):\n%s", diff)
	}

	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("second Free: %v, want ErrInvalidHandle", err)
	}
	if err := b.Write(0, []byte{1}); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("Write after Free: %v, want ErrInvalidHandle", err)
	}
	if err := k.Launch(grid, block, 0, BufferArg(b)); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("launch with a freed buffer: %v, want ErrInvalidHandle", err)
	}
	var nilModule *Module
	if _, err := nilModule.Function("k"); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("nil module: %v, want ErrInvalidHandle", err)
	}
}

func TestInfoGrowsItsBuffer(t *testing.T) {
	f := newFakeHost(t)
	f.info = `{"name":"` + strings.Repeat("x", 600) + `","memory_mib":1}`
	info, err := Info(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Name) != 600 || info.MemoryMiB != 1 {
		t.Errorf("Info = %+v", info)
	}
	f.info = `not json`
	if _, err := Info(0); !errors.Is(err, ErrDriver) {
		t.Errorf("a description that is not JSON: %v, want ErrDriver", err)
	}
}
