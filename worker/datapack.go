package worker

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// Packing a module's data segments.
//
// Go's linker writes a module's initial memory as one active data segment
// per run of non-zero bytes: 28,376 segments for an empty Go program.
// wazero evaluates each segment's offset and copies each on its own at
// every instantiation, which cost about 1.5 ms per task, more than
// copying the whole image would. packData rewrites the data section into
// a few segments that write the same bytes: the module's memory after
// instantiation is identical, byte for byte, and nothing else in the
// module changes. It runs before compiling (the module's SHA-256, and so
// the job's ID, is that of the file as given).

const (
	sectionMemory    = 5
	sectionData      = 11
	sectionDataCount = 12
	// packMaxSpan bounds the image packData builds: a module whose
	// segments spread over more is left as it is.
	packMaxSpan = 64 << 20
	// packMinGap is the shortest run of zero bytes that splits a packed
	// segment: shorter gaps cost less to copy than a segment of its own.
	packMinGap = 4 << 10
)

// errNotPackable says that a module is left as it is: a data count
// section (memory.init or data.drop may name segments by index), a passive
// segment, an offset that is not a constant, no memory of its own, or
// segments spread too far or past 4 GiB.
var errNotPackable = errors.New("worker: data segments not packable")

// packData returns the module with its active data segments packed, or bin
// itself when it cannot be packed or is malformed (compiling it then
// reports what is wrong) or packing would gain nothing.
func packData(bin []byte) []byte {
	out, err := packDataSegments(bin)
	if err != nil {
		return bin
	}
	return out
}

// packDataSegments is packData with the reason when it leaves bin alone.
func packDataSegments(bin []byte) ([]byte, error) {
	const header = 8
	if len(bin) < header || !bytes.Equal(bin[:4], []byte("\x00asm")) {
		return nil, errNotPackable
	}
	var dataStart, dataEnd int // the data section, id and size included
	var data []byte            // its content
	hasMemory := false
	for pos := header; pos < len(bin); {
		id := bin[pos]
		size, n := binary.Uvarint(bin[pos+1:])
		if n <= 0 || n > 5 || size > uint64(len(bin)-pos-1-n) {
			return nil, errNotPackable
		}
		content := bin[pos+1+n : pos+1+n+int(size)]
		switch id {
		case sectionMemory:
			count, k := binary.Uvarint(content)
			hasMemory = k > 0 && count > 0
		case sectionDataCount:
			return nil, errNotPackable
		case sectionData:
			dataStart, dataEnd, data = pos, pos+1+n+int(size), content
		}
		pos += 1 + n + int(size)
	}
	if data == nil || !hasMemory {
		return nil, errNotPackable
	}
	segs, err := readDataSegments(data)
	if err != nil {
		return nil, err
	}
	if len(segs) < 2 {
		return nil, errNotPackable
	}
	lo, hi := segs[0].offset, segs[0].offset
	for _, s := range segs {
		lo = min(lo, s.offset)
		hi = max(hi, s.offset+uint64(len(s.bytes)))
	}
	if hi-lo > packMaxSpan || hi > 1<<32 {
		return nil, errNotPackable
	}
	// Later segments overwrite earlier ones, as instantiation applies them
	// in order.
	image := make([]byte, hi-lo)
	for _, s := range segs {
		copy(image[s.offset-lo:], s.bytes)
	}
	packed := packImage(image, lo)
	if len(packed) >= len(segs) {
		return nil, errNotPackable
	}
	var sec []byte
	sec = binary.AppendUvarint(sec, uint64(len(packed)))
	for _, s := range packed {
		sec = append(sec, 0, 0x41) // active, memory 0; i32.const
		sec = appendSleb32(sec, int32(uint32(s.offset)))
		sec = append(sec, 0x0b) // end
		sec = binary.AppendUvarint(sec, uint64(len(s.bytes)))
		sec = append(sec, s.bytes...)
	}
	out := make([]byte, 0, len(bin)-len(data)+len(sec)+len(image)/8)
	out = append(out, bin[:dataStart]...)
	out = append(out, sectionData)
	out = binary.AppendUvarint(out, uint64(len(sec)))
	out = append(out, sec...)
	out = append(out, bin[dataEnd:]...)
	return out, nil
}

// dataSegment is an active data segment of memory 0 at a constant offset.
type dataSegment struct {
	offset uint64
	bytes  []byte
}

// readDataSegments decodes a data section's content; any segment that is
// not active on memory 0 at an i32.const offset makes it errNotPackable.
func readDataSegments(b []byte) ([]dataSegment, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, errNotPackable
	}
	b = b[n:]
	segs := make([]dataSegment, 0, count)
	for range count {
		// flags 0: active on memory 0, offset expression, bytes.
		if len(b) < 2 || b[0] != 0 || b[1] != 0x41 {
			return nil, errNotPackable
		}
		off, k := readSleb32(b[2:])
		if k <= 0 || len(b) < 2+k+1 || b[2+k] != 0x0b {
			return nil, errNotPackable
		}
		b = b[2+k+1:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, errNotPackable
		}
		segs = append(segs, dataSegment{offset: uint64(uint32(off)), bytes: b[k : k+int(size)]})
		b = b[k+int(size):]
	}
	if len(b) != 0 {
		return nil, errNotPackable
	}
	return segs, nil
}

// packImage cuts an image of memory from base into segments of its
// non-zero bytes, joining those separated by fewer than packMinGap zeros.
// Bytes it leaves out are zero, as a fresh memory is.
func packImage(image []byte, base uint64) []dataSegment {
	var segs []dataSegment
	start, end := -1, 0 // the segment being built: image[start:end], end just past a non-zero byte
	for i, c := range image {
		if c == 0 {
			continue
		}
		if start >= 0 && i-end >= packMinGap {
			segs = append(segs, dataSegment{offset: base + uint64(start), bytes: image[start:end]})
			start = -1
		}
		if start < 0 {
			start = i
		}
		end = i + 1
	}
	if start >= 0 {
		segs = append(segs, dataSegment{offset: base + uint64(start), bytes: image[start:end]})
	}
	return segs
}

// readSleb32 decodes a signed LEB128 number of at most 5 bytes; n <= 0 if
// malformed.
func readSleb32(b []byte) (v int32, n int) {
	var result int64
	var shift uint
	for n < len(b) && n < 5 {
		c := b[n]
		n++
		result |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				result |= -1 << shift
			}
			if result < -1<<31 || result > 1<<31-1 {
				return 0, -1
			}
			return int32(result), n
		}
	}
	return 0, -1
}

// appendSleb32 appends v as signed LEB128.
func appendSleb32(b []byte, v int32) []byte {
	x := int64(v)
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if (x == 0 && c&0x40 == 0) || (x == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
