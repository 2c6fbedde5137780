package job

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
)

// The merge state encoding (MarshalBinary):
//
//	"IPMS" 0x01                 magic and version
//	[32]byte                    SHA-256 of the specs (with defaults) as JSON
//	uvarint                     number of entries
//	per entry:
//	  uvarint                   number of accumulators
//	  per accumulator, sorted by (group, "*" key) in byte order:
//	    string group, string key, uvarint length, the accumulator's state
//
// With several group_by paths, a group is their values, each a uvarint
// length and its bytes (joinGroupKey); with one, the value itself.
//
// A string is a uvarint length and its bytes. Every state is canonical:
// equal merge states give equal bytes, so the encoding is as
// order-independent as Result. Decoding checks every field, since states
// come from other peers.
const mergeStateMagic = "IPMS\x01"

// MarshalBinary encodes the state of every fixed-size accumulator, to be
// restored by UnmarshalBinary or combined by decoding into another Merger
// built from the same specs and calling Merge. The bytes are canonical.
// A Merger with an ordered entry (collect, concat) returns
// ErrNotMergeable.
func (m *Merger) MarshalBinary() ([]byte, error) {
	if err := m.mergeable(); err != nil {
		return nil, err
	}
	b := append([]byte(mergeStateMagic), m.digest[:]...)
	b = binary.AppendUvarint(b, uint64(len(m.entries)))
	var payload []byte
	for _, e := range m.entries {
		keys := e.sortedKeys()
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendStateString(b, k.group)
			b = appendStateString(b, k.star)
			payload = e.accs[k].appendState(payload[:0])
			b = binary.AppendUvarint(b, uint64(len(payload)))
			b = append(b, payload...)
		}
	}
	return b, nil
}

// UnmarshalBinary replaces the Merger's state with one that MarshalBinary
// wrote for the same specs. It returns ErrMergeMismatch for other specs,
// ErrBadMergeState (wrapped, with the reason) for malformed data and
// ErrNotMergeable for a Merger with an ordered entry; on error the Merger
// is unchanged.
func (m *Merger) UnmarshalBinary(data []byte) error {
	if err := m.mergeable(); err != nil {
		return err
	}
	r := &stateReader{b: data}
	if !bytes.HasPrefix(r.b, []byte(mergeStateMagic)) {
		return fmt.Errorf("%w: not a merge state", ErrBadMergeState)
	}
	r.b = r.b[len(mergeStateMagic):]
	if !bytes.Equal(r.take(len(m.digest)), m.digest[:]) {
		if r.err != nil {
			return r.err
		}
		return fmt.Errorf("merge: decode state: %w", ErrMergeMismatch)
	}
	if n := r.uvarint(); r.err == nil && n != uint64(len(m.entries)) {
		r.fail("%d entries, want %d", n, len(m.entries))
	}
	states := make([]map[accKey]accumulator, len(m.entries))
	for i, e := range m.entries {
		n := r.uvarint()
		if n > MaxMergeKeys {
			r.fail("entry %q has %d accumulators, at most %d", e.spec.Name, n, MaxMergeKeys)
		}
		if r.err != nil {
			return r.err
		}
		states[i] = make(map[accKey]accumulator, n)
		var prev accKey
		for j := range n {
			k := accKey{group: r.str(), star: r.str()}
			switch {
			case j > 0 && compareAccKeys(prev, k) >= 0:
				r.fail("entry %q: keys out of order", e.spec.Name)
			case !e.grouped() && k.group != "", !e.starred() && k.star != "":
				r.fail("entry %q: unexpected group or key", e.spec.Name)
			case len(e.groups) > 1 && !validGroupKey(k.group, len(e.groups)):
				r.fail("entry %q: a group is not %d values", e.spec.Name, len(e.groups))
			}
			prev = k
			size := r.uvarint()
			if size > uint64(len(r.b)) {
				r.fail("truncated state")
			}
			sub := &stateReader{b: r.take(int(size))}
			if r.err != nil {
				return r.err
			}
			a := e.newAcc()
			a.decodeState(sub)
			if sub.err == nil && len(sub.b) > 0 {
				sub.fail("trailing bytes")
			}
			if sub.err != nil {
				return fmt.Errorf("entry %q: %w", e.spec.Name, sub.err)
			}
			states[i][k] = a
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return r.err
	}
	for i, e := range m.entries {
		e.accs = states[i]
	}
	return nil
}

// Merge folds other's state into m, as if every result added to other had
// been added to m: merging is associative and commutative, so mergers of
// any parts of a run, merged in any tree, give the same Result bytes. Both
// must come from the same specs (else ErrMergeMismatch) and have no
// ordered entry (else ErrNotMergeable). other is not changed; merging a
// Merger with itself doubles it. On error m is unchanged. Results of one
// task must reach exactly one of the merged Mergers.
func (m *Merger) Merge(other *Merger) error {
	if other == nil {
		return fmt.Errorf("merge: nil merger: %w", ErrMergeMismatch)
	}
	if m.digest != other.digest {
		return fmt.Errorf("merge: %w", ErrMergeMismatch)
	}
	if err := m.mergeable(); err != nil {
		return err
	}
	if other == m {
		b, err := other.MarshalBinary()
		if err != nil {
			return err
		}
		clone := &Merger{specs: m.specs, digest: m.digest}
		for _, s := range m.specs {
			clone.entries = append(clone.entries, newMergeEntry(s))
		}
		if err := clone.UnmarshalBinary(b); err != nil {
			return err
		}
		other = clone
	}
	for i, e := range m.entries {
		fresh := 0
		for k, oa := range other.entries[i].accs {
			a, ok := e.accs[k]
			if !ok {
				fresh++
				continue
			}
			if err := a.mergeCheck(oa); err != nil {
				return fmt.Errorf("merge %q: %w", e.spec.Name, err)
			}
		}
		if fresh > 0 && len(e.accs)+fresh > MaxMergeKeys {
			return fmt.Errorf("merge %q: more than %d distinct groups and keys: %w", e.spec.Name, MaxMergeKeys, ErrBadMergeState)
		}
	}
	for i, e := range m.entries {
		for k, oa := range other.entries[i].accs {
			a, ok := e.accs[k]
			if !ok {
				a = e.newAcc()
				e.accs[k] = a
			}
			a.merge(oa)
		}
	}
	return nil
}

// mergeable reports ErrNotMergeable for a Merger with ordered entries.
func (m *Merger) mergeable() error {
	if len(m.sinks) > 0 {
		return fmt.Errorf("merge %q: %s streams rows in task order: %w",
			m.sinks[0].spec.Name, m.sinks[0].spec.Rule, ErrNotMergeable)
	}
	return nil
}

func appendStateString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStateFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// appendStateBigInt appends a sign byte (0 zero, 1 positive, 2 negative) and,
// unless zero, the magnitude as a length-prefixed big-endian byte string.
func appendStateBigInt(b []byte, x *big.Int) []byte {
	switch x.Sign() {
	case 0:
		return append(b, 0)
	case 1:
		b = append(b, 1)
	default:
		b = append(b, 2)
	}
	mag := x.Bytes()
	b = binary.AppendUvarint(b, uint64(len(mag)))
	return append(b, mag...)
}

// stateReader decodes a merge state; the first problem sticks in err and
// every later read returns zero values.
type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadMergeState, fmt.Sprintf(format, args...))
	}
	r.b = nil
}

func (r *stateReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("truncated")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *stateReader) byte() byte {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return v[0]
}

func (r *stateReader) bool() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("bad boolean")
	return false
}

func (r *stateReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a non-negative int64.
func (r *stateReader) count() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.fail("count out of range")
		return 0
	}
	return int64(v)
}

func (r *stateReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("truncated string")
		return ""
	}
	return string(r.take(int(n)))
}

// float reads a finite float64.
func (r *stateReader) float() float64 {
	v := r.take(8)
	if v == nil {
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(v))
	if math.IsInf(f, 0) || math.IsNaN(f) {
		r.fail("non-finite number")
		return 0
	}
	return f
}

func (r *stateReader) bigInt() *big.Int {
	x := new(big.Int)
	sign := r.byte()
	if sign == 0 || r.err != nil {
		return x
	}
	n := r.uvarint()
	if n == 0 || n > 1<<12 || n > uint64(len(r.b)) {
		r.fail("bad integer length")
		return x
	}
	mag := r.take(int(n))
	if mag[0] == 0 {
		r.fail("integer with a leading zero byte")
		return x
	}
	x.SetBytes(mag)
	switch sign {
	case 1:
	case 2:
		x.Neg(x)
	default:
		r.fail("bad integer sign")
	}
	return x
}

// limbs reads what appendLimbs wrote into dst (all zero), requiring the
// canonical form: carried limbs, the range trimmed to non-zero ends, and a
// top limb far from overflow.
func (r *stateReader) limbs(dst []int64) {
	n := r.uvarint()
	if n == 0 || r.err != nil {
		return
	}
	lo := r.uvarint()
	if n > uint64(len(dst)) || lo > uint64(len(dst))-n {
		r.fail("limbs out of range")
		return
	}
	top := len(dst) - 1
	for i := int(lo); i < int(lo+n); i++ {
		v := r.varint()
		switch {
		case i < top && (v < 0 || v > saChunkMask):
			r.fail("limb not carried")
		case i == top && (v > saMaxTop || v < -saMaxTop):
			r.fail("top limb out of range")
		case v == 0 && (i == int(lo) || i == int(lo+n)-1):
			r.fail("limbs not trimmed")
		}
		dst[i] = v
	}
}

func appendStateCount(b []byte, n int64) []byte { return binary.AppendUvarint(b, uint64(n)) }

func appendStateBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// validGroupKey reports whether key is n group values joined by
// joinGroupKey, in its one encoding (shortest uvarints).
func validGroupKey(key string, n int) bool {
	texts, ok := splitGroupKey(key, n)
	return ok && joinGroupKey(texts) == key
}
