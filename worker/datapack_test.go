package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// dataModule is a module with a memory of one page and the given data
// section content (count and segments), exporting its memory as "mem".
func dataModule(extra []byte, segs ...[]byte) []byte {
	var data []byte
	data = binary.AppendUvarint(data, uint64(len(segs)))
	for _, s := range segs {
		data = append(data, s...)
	}
	b := wasmModule(wasmSection(5, 1, 0, 1), wasmSection(7, 1, 3, 'm', 'e', 'm', 2, 0))
	b = append(b, extra...)
	b = append(b, sectionData)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// activeSeg is an active segment of memory 0 at offset.
func activeSeg(offset int32, content ...byte) []byte {
	s := appendSleb32([]byte{0, 0x41}, offset)
	s = append(s, 0x0b)
	s = binary.AppendUvarint(s, uint64(len(content)))
	return append(s, content...)
}

// initialMemory instantiates bin without running anything and returns a
// copy of its memory.
func initialMemory(t *testing.T, bin []byte) []byte {
	t.Helper()
	ctx := context.Background()
	// The interpreter compiles a large module in a fraction of the time.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	mem, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		t.Fatal("cannot read memory")
	}
	return bytes.Clone(mem)
}

// countSegments returns the number of data segments of a module.
func countSegments(t *testing.T, bin []byte) int {
	t.Helper()
	for pos := 8; pos < len(bin); {
		size, n := binary.Uvarint(bin[pos+1:])
		if bin[pos] == sectionData {
			count, _ := binary.Uvarint(bin[pos+1+n:])
			return int(count)
		}
		pos += 1 + n + int(size)
	}
	return 0
}

func TestPackDataKeepsMemory(t *testing.T) {
	gap := make([]byte, packMinGap+10)
	tests := []struct {
		name     string
		bin      []byte
		packed   bool // whether packData changes the module
		segments int  // segments after packing
	}{
		{
			name:     "neighbours join",
			bin:      dataModule(nil, activeSeg(16, 1, 2, 3), activeSeg(20, 4), activeSeg(100, 5, 0, 6)),
			packed:   true,
			segments: 1,
		},
		{
			name:     "later segment overwrites earlier",
			bin:      dataModule(nil, activeSeg(8, 1, 1, 1, 1), activeSeg(9, 7, 0), activeSeg(30, 9)),
			packed:   true,
			segments: 1,
		},
		{
			name:     "long zero run splits",
			bin:      dataModule(nil, activeSeg(0, 1), activeSeg(1, gap...), activeSeg(int32(1+len(gap)), 2), activeSeg(int32(2+len(gap)), 3)),
			packed:   true,
			segments: 2,
		},
		{
			name:   "passive segment: left alone",
			bin:    dataModule(nil, activeSeg(0, 1), append([]byte{1}, 1, 2), activeSeg(4, 2)),
			packed: false,
		},
		{
			name:   "data count section: left alone",
			bin:    dataModule(wasmSection(sectionDataCount, 2), activeSeg(0, 1), activeSeg(4, 2)),
			packed: false,
		},
		{
			name:   "one segment: nothing to gain",
			bin:    dataModule(nil, activeSeg(0, 1, 2)),
			packed: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := packData(tc.bin)
			if changed := !bytes.Equal(got, tc.bin); changed != tc.packed {
				t.Fatalf("packData changed the module: %v, want %v", changed, tc.packed)
			}
			if !tc.packed {
				return
			}
			if n := countSegments(t, got); n != tc.segments {
				t.Errorf("%d segments after packing, want %d", n, tc.segments)
			}
			if !bytes.Equal(initialMemory(t, got), initialMemory(t, tc.bin)) {
				t.Error("the packed module's initial memory differs from the original's")
			}
		})
	}
}

// TestPackDataGoModule packs a Go-built module, tens of thousands of
// segments, into a few, with the same initial memory, as a worker does:
// after metering it.
func TestPackDataGoModule(t *testing.T) {
	needHostile(t)
	bin, err := os.ReadFile(hostile.path)
	if err != nil {
		t.Fatal(err)
	}
	if bin, err = meterModule(bin); err != nil {
		t.Fatal(err)
	}
	packed := packData(bin)
	before, after := countSegments(t, bin), countSegments(t, packed)
	t.Logf("%d data segments packed into %d; module %d -> %d bytes", before, after, len(bin), len(packed))
	if after > 64 || after >= before {
		t.Errorf("%d segments after packing (%d before), want at most 64", after, before)
	}
	if !bytes.Equal(initialMemory(t, packed), initialMemory(t, bin)) {
		t.Error("the packed module's initial memory differs from the original's")
	}
}
