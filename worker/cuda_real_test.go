package worker

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRealCUDADriver runs the driver calls of the host module on the
// machine's CUDA driver, where there is one with a device; elsewhere it
// checks that the absence of a driver is reported as ErrCUDAUnavailable,
// and skips the rest.
func TestRealCUDADriver(t *testing.T) {
	d, err := loadCUDADriver()
	if err != nil {
		if !errors.Is(err, ErrCUDAUnavailable) {
			t.Fatalf("loadCUDADriver: %v, want ErrCUDAUnavailable", err)
		}
		t.Skipf("no CUDA driver: %v", err)
	}
	n, err := d.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("CUDA driver with %d devices: %v", n, err)
	}
	dev, err := d.Device(0)
	if err != nil || dev.Name == "" || dev.MemoryMiB <= 0 || !strings.Contains(dev.ComputeCapability, ".") {
		t.Fatalf("Device(0) = %+v, %v", dev, err)
	}
	t.Logf("device 0: %+v", dev)
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("no clang to compile the test kernels to PTX")
	}
	ptxPath := filepath.Join(t.TempDir(), "kernels.ptx")
	if out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_60", "-nocudainc", "-nocudalib",
		"-O2", "-S", "-o", ptxPath, "testdata/kernels.cu").CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	ptx, err := os.ReadFile(ptxPath)
	if err != nil {
		t.Fatal(err)
	}

	c, err := d.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	}()
	if _, err := c.LoadModule([]byte(".version 5.0\n.target sm_60\nthis is not PTX\n")); err == nil {
		t.Error("LoadModule accepted a broken module")
	} else {
		t.Logf("broken module: %v", err)
	}
	mod, err := c.LoadModule(ptx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Function(mod, "no_such_kernel"); !errors.Is(err, ErrCUDANotFound) {
		t.Errorf("Function(no_such_kernel) = %v, want ErrCUDANotFound", err)
	}
	add, err := c.Function(mod, "add_u32")
	if err != nil {
		t.Fatal(err)
	}
	const count = 1000
	buf, err := c.Alloc(4 * count)
	if err != nil {
		t.Fatal(err)
	}
	host := make([]byte, 4*count)
	for i := range count {
		binary.LittleEndian.PutUint32(host[4*i:], uint32(i))
	}
	if err := c.CopyHtoD(buf, host); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(add, [3]uint32{(count + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, []uint64{buf, count, 7}); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(host, buf); err != nil {
		t.Fatal(err)
	}
	for i := range count {
		if v := binary.LittleEndian.Uint32(host[4*i:]); v != uint32(i)+7 {
			t.Fatalf("element %d = %d, want %d", i, v, i+7)
		}
	}

	echo, err := c.Function(mod, "echo_params")
	if err != nil {
		t.Fatal(err)
	}
	switch sizes, err := c.ParamSizes(echo); {
	case err != nil:
		t.Errorf("ParamSizes(echo_params): %v", err)
	case sizes == nil:
		t.Log("the driver cannot say how it reads parameters (before CUDA 12.4)")
	case !slices.Equal(sizes, []int{8, 4, 8, 4, 8, 8}):
		t.Errorf("the driver reads echo_params's parameters as %v bytes, want [8 4 8 4 8 8]", sizes)
	}
	out, err := c.Alloc(8 * 6)
	if err != nil {
		t.Fatal(err)
	}
	params := []uint64{out, 5, 1 << 40, uint64(math.Float32bits(1.5)), math.Float64bits(-2.25), buf}
	if err := c.Launch(echo, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, params); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8*6)
	if err := c.CopyDtoH(got, out); err != nil {
		t.Fatal(err)
	}
	var echoed []uint64
	for i := range 6 {
		echoed = append(echoed, binary.LittleEndian.Uint64(got[8*i:]))
	}
	if diff := cmp.Diff(params, echoed); diff != "" {
		t.Errorf("kernel parameters (-sent +seen):\n%s", diff)
	}
	if err := c.Free(out); err != nil {
		t.Error(err)
	}
	// Memory another allocation left behind comes back zeroed.
	if err := c.Free(buf); err != nil {
		t.Error(err)
	}
	again, err := c.Alloc(4 * count)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(host, again); err != nil {
		t.Fatal(err)
	}
	for i, b := range host {
		if b != 0 {
			t.Fatalf("byte %d of a new allocation is %#x, want 0", i, b)
		}
	}
	if _, err := c.Alloc(1 << 50); !errors.Is(err, ErrCUDAOutOfMemory) {
		t.Errorf("Alloc(1 PiB) = %v, want ErrCUDAOutOfMemory", err)
	}
}
