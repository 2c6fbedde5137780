package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Metering: how a task's work is counted (DESIGN.md invariant 12).
//
// Before a module is compiled, meterModule rewrites its binary so that it
// counts the WebAssembly instructions it executes into a mutable i64
// global, exported as MeterExport, which the worker reads when the task
// ends (Result.Work). The count depends on nothing but the module and
// what the host functions return, which are the task's inputs and seed,
// so every honest device counts the same number for the same task,
// whatever its speed, load or pauses. GPU kernels add the threads they
// launch (grid × block of every accepted launch; cuda.go).
//
// # What counts
//
// A function body is cut into segments, straight-line runs of
// instructions that control enters only at the first: at the function's
// entry, at a loop's header, at either arm of an if, after the end of a
// block or if that something other than falling through reaches, after
// a br_if. A segment's count is its number of instructions, the control
// instruction that ends it included; block, loop, end and nop, which
// compile to nothing, count nothing, and neither does what follows an
// unconditional branch (br, br_table, return, unreachable) in the same
// segment, which never runs. The counter grows by every segment control
// passes through, so it is the number of instructions executed: exactly
// for a task that returns from _start. A task that ends deeper in its
// calls, by proc_exit (Go's os.Exit, and the end of every Go program) or
// by a trap, leaves out what the functions active at that moment had not
// yet added (see below): for a function with a loop, what it executed
// since it last called another; for one without, what it executed since
// it was called, at most its own length. It also counts segments control
// was bound for but never reached (the advance charges below). All of it
// the same on every device.
//
// # How (and what it costs)
//
// Adding to a global at every segment would load and store memory at
// every basic block, one dependent chain through the whole run. Instead:
//
//   - Each function counts into a local of its own (a register) and adds
//     it to the global (a flush) before every return and at its end, so
//     that the global is whole whenever a function is left normally; the
//     body is wrapped in a block of the function's result type, so that a
//     branch to the function's label flushes too. A function with a loop
//     (a branch back to a loop header) flushes before every call as well,
//     so that a long-running one that never returns (its callee exits)
//     has counted all but its last stretch; a function without one runs
//     each of its instructions at most once a call and skips those
//     flushes. (Flushes, a load and a store each, were the costliest part
//     of metering the examples built by Go, which call a function every
//     hundred or so instructions.)
//   - A segment control can only reach from segments that know they lead
//     to it is virtual: those segments add its count in advance (their
//     "charge" includes it), and it adds nothing. Where a conditional
//     branch charged one side in advance, the other side's first segment
//     takes it back (the segment after a br_if, the then arm of an if).
//   - A br_table's targets could not be charged in advance (the segment
//     before it does not know where it goes); in code built by Go every
//     basic block is such a target, of the table that dispatches the
//     function's jumps and resumptions, and most are entered by falling
//     through. So a br_table whose targets take no values goes through
//     trampolines, one per target, each charging its target in advance
//     and branching on (see brTable).
//
// BenchmarkMeter measures what this costs the example programs;
// docs/benchmarks.md has the figures.
//
// # What it reads
//
// The decoder knows the instructions of WebAssembly 2.0 that wazero
// enables by default (api.CoreFeaturesV2): the MVP, sign extension,
// non-trapping float-to-int conversion and bulk memory (0xFC), reference
// types and SIMD (0xFD). Go's wasip1 port uses sign extension,
// saturating truncation, memory.copy and memory.fill; no SIMD. Any other
// opcode (threads, tail calls, exceptions) is refused: "metering:
// unknown opcode 0x.. at offset N", as is any malformed module. The
// module is outside input: the decoder is fuzzed (FuzzMeterModule). A
// refused module fails its task with FailureBadModule, the same on every
// device.
//
// Custom sections whose name starts with ".debug_" (DWARF) are dropped:
// their code offsets would no longer match the rewritten bodies, and
// wazero would report wrong source lines in trap messages.

// MeterExport is the name under which a metered module exports its work
// counter, a mutable i64 global. A module that already exports this name
// is refused.
const MeterExport = "__idlepool_work"

// MeterRule is the version of the metering rule: what counts and how. It
// goes with every count a worker reports (Result.Work), so that replicas
// metered by different rules are never taken to agree. Any change to the
// count meterModule's code arrives at, or to what GPU launches add,
// needs a new rule.
const MeterRule = 1

// Section IDs of the WebAssembly binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secGlobal    = 6
	secExport    = 7
	secCode      = 10
	secDataCount = 12
	secTag       = 13
)

// sectionRank orders non-custom sections as the binary format requires;
// 0 for an unknown ID.
func sectionRank(id byte) int {
	switch {
	case id >= 1 && id <= 5:
		return int(id) * 10
	case id == secTag:
		return 55
	case id >= 6 && id <= 9:
		return int(id) * 10
	case id == secDataCount:
		return 95
	case id == 10 || id == 11:
		return int(id) * 10
	}
	return 0
}

// funcType is a function type: its parameter count and its results (one
// value type byte each).
type funcType struct {
	params  uint32
	results []byte
}

// trampolineType is the function type [i32] -> [] that the blocks of a
// br_table's trampolines take (see brTable).
var trampolineType = []byte{0x60, 0x01, 0x7F, 0x00}

// maxTrampolines bounds the distinct targets of a br_table that gets
// trampolines (a block each); a larger table charges at its targets.
const maxTrampolines = 1024

// meterModule returns bin with the work counter injected (see above), or
// an error naming what it could not decode. bin is not modified.
func meterModule(bin []byte) ([]byte, error) { return meterModuleWith(bin, false) }

// meterModuleWith is meterModule; with plain, every segment adds its
// count to the global at its head (no locals, no advance charges, no
// trampolines): the simple form whose counts the tests compare with
// meterModule's.
func meterModuleWith(bin []byte, plain bool) ([]byte, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, errors.New("metering: not a WebAssembly module (no \\0asm magic)")
	}
	if v := binary.LittleEndian.Uint32(bin[4:8]); v != 1 {
		return nil, fmt.Errorf("metering: unsupported binary version %d at offset 4", v)
	}
	type section struct {
		id      byte
		start   int // offset of the section's content in bin
		content []byte
	}
	var sections []section
	r := &reader{b: bin, off: 8}
	lastRank := 0
	seen := map[byte]bool{}
	for r.off < len(bin) {
		at := r.off
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		content, err := r.bytes(int(size))
		if err != nil {
			return nil, fmt.Errorf("metering: section %d at offset %d: %w", id, at, err)
		}
		if id != secCustom {
			rank := sectionRank(id)
			switch {
			case rank == 0:
				return nil, fmt.Errorf("metering: unknown section %d at offset %d", id, at)
			case seen[id] || rank < lastRank:
				return nil, fmt.Errorf("metering: section %d at offset %d is repeated or out of order", id, at)
			}
			seen[id], lastRank = true, rank
		}
		sections = append(sections, section{id: id, start: r.off - len(content), content: content})
	}

	// New entries go at the end of their index spaces, so that no index
	// the module uses changes: the counter after the imported and own
	// globals, new types after the module's.
	var importedGlobals, ownGlobals uint32
	var types []funcType
	var funcs []uint32 // the type of each function the module defines
	var exports []byte // the export section's content, nil when absent
	for _, s := range sections {
		var err error
		switch s.id {
		case secType:
			types, err = readTypes(s.content, s.start)
		case secImport:
			importedGlobals, err = countImportedGlobals(s.content, s.start)
		case secFunction:
			funcs, err = readFunctions(s.content, s.start, len(types))
		case secGlobal:
			ownGlobals, err = (&reader{b: s.content, base: s.start}).u32()
		case secExport:
			exports = s.content
			err = checkExports(s.content, s.start)
		}
		if err != nil {
			return nil, err
		}
	}
	if uint64(importedGlobals)+uint64(ownGlobals) >= 1<<27 {
		return nil, fmt.Errorf("metering: %d globals, no room for the work counter", uint64(importedGlobals)+uint64(ownGlobals))
	}
	m := &meterer{
		counter: appendU32(nil, importedGlobals+ownGlobals), plain: plain,
		types: types, funcs: funcs, trampolineType: -1,
	}
	var code []byte
	for _, s := range sections {
		if s.id == secCode {
			var err error
			if code, err = m.code(s.content, s.start); err != nil {
				return nil, err
			}
		}
	}

	out := make([]byte, 0, len(bin)+len(bin)/4)
	out = append(out, bin[:8]...)
	emit := func(id byte, content []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(content)))
		out = append(out, content...)
	}
	newGlobal := []byte{0x7E, 0x01, 0x42, 0x00, 0x0B} // mut i64, init i64.const 0 end
	counter := importedGlobals + ownGlobals
	typesDone, globalsDone, exportsDone := false, false, false
	// emitMissing adds the sections a module lacks, in their place
	// before the first section ranked after them.
	emitMissing := func(rank int) {
		if !typesDone && len(m.newTypes) > 0 && rank > sectionRank(secType) {
			emit(secType, appendTypes(nil, 0, m.newTypes))
			typesDone = true
		}
		if !globalsDone && rank > sectionRank(secGlobal) {
			emit(secGlobal, append(appendU32(nil, 1), newGlobal...))
			globalsDone = true
		}
		if !exportsDone && rank > sectionRank(secExport) {
			emit(secExport, appendExport(appendU32(nil, 1), counter))
			exportsDone = true
		}
	}
	for _, s := range sections {
		if s.id == secCustom {
			name, ok := customName(s.content)
			if ok && strings.HasPrefix(name, ".debug_") {
				continue
			}
			emit(s.id, s.content)
			continue
		}
		emitMissing(sectionRank(s.id))
		switch s.id {
		case secType:
			emit(secType, appendTypes(s.content[lebLen(s.content):], uint32(len(types)), m.newTypes))
			typesDone = true
		case secGlobal:
			c := appendU32(nil, ownGlobals+1)
			c = append(c, s.content[lebLen(s.content):]...)
			emit(secGlobal, append(c, newGlobal...))
			globalsDone = true
		case secExport:
			n, _ := (&reader{b: exports}).u32() // checked by checkExports
			c := appendU32(nil, n+1)
			c = append(c, exports[lebLen(exports):]...)
			emit(secExport, appendExport(c, counter))
			exportsDone = true
		case secCode:
			emit(secCode, code)
		default:
			emit(s.id, s.content)
		}
	}
	emitMissing(1 << 30)
	return out, nil
}

// appendTypes returns a type section's content: the entries of the
// module's n types (entries, without their count) and then extra.
func appendTypes(entries []byte, n uint32, extra [][]byte) []byte {
	out := appendU32(nil, n+uint32(len(extra)))
	out = append(out, entries...)
	for _, t := range extra {
		out = append(out, t...)
	}
	return out
}

// readTypes decodes a type section whose content starts at offset base of
// the module.
func readTypes(content []byte, base int) ([]funcType, error) {
	r := &reader{b: content, base: base}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if n > 1000000 {
		return nil, fmt.Errorf("metering: %d types at offset %d, more than the 1000000 wazero accepts", n, base)
	}
	types := make([]funcType, 0, min(n, uint32(len(content))))
	for range n {
		at := r.pos()
		form, err := r.byte()
		if err != nil {
			return nil, err
		}
		if form != 0x60 {
			return nil, fmt.Errorf("metering: unknown type form 0x%02x at offset %d", form, at)
		}
		var t funcType
		for i := range 2 {
			k, err := r.u32()
			if err != nil {
				return nil, err
			}
			vs, err := r.bytes(int(k))
			if err != nil {
				return nil, err
			}
			for j, v := range vs {
				if !valueType(v) {
					return nil, fmt.Errorf("metering: unknown value type 0x%02x at offset %d", v, r.pos()-len(vs)+j)
				}
			}
			if i == 0 {
				t.params = k
			} else {
				t.results = vs
			}
		}
		types = append(types, t)
	}
	if r.off != len(content) {
		return nil, fmt.Errorf("metering: %d stray bytes at the end of the type section at offset %d", len(content)-r.off, r.pos())
	}
	return types, nil
}

// valueType reports whether v is a value type of WebAssembly 2.0.
func valueType(v byte) bool {
	switch v {
	case 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
		return true
	}
	return false
}

// readFunctions decodes a function section (the type index of each
// function the module defines) whose content starts at offset base of
// the module, given the number of types.
func readFunctions(content []byte, base, types int) ([]uint32, error) {
	r := &reader{b: content, base: base}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	funcs := make([]uint32, 0, min(n, uint32(len(content))))
	for range n {
		at := r.pos()
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		if uint64(t) >= uint64(types) {
			return nil, fmt.Errorf("metering: function of type %d at offset %d, the module has %d types", t, at, types)
		}
		funcs = append(funcs, t)
	}
	if r.off != len(content) {
		return nil, fmt.Errorf("metering: %d stray bytes at the end of the function section at offset %d", len(content)-r.off, r.pos())
	}
	return funcs, nil
}

// customName returns a custom section's name.
func customName(content []byte) (string, bool) {
	r := &reader{b: content}
	n, err := r.u32()
	if err != nil {
		return "", false
	}
	b, err := r.bytes(int(n))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// appendExport appends the export of global idx as MeterExport.
func appendExport(b []byte, idx uint32) []byte {
	b = appendU32(b, uint32(len(MeterExport)))
	b = append(b, MeterExport...)
	b = append(b, 0x03) // global
	return appendU32(b, idx)
}

// countImportedGlobals counts the global imports of an import section
// whose content starts at offset base of the module.
func countImportedGlobals(content []byte, base int) (uint32, error) {
	r := &reader{b: content, base: base}
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	var globals uint32
	for range n {
		for range 2 { // module and field names
			l, err := r.u32()
			if err != nil {
				return 0, err
			}
			if _, err := r.bytes(int(l)); err != nil {
				return 0, err
			}
		}
		at := r.pos()
		kind, err := r.byte()
		if err != nil {
			return 0, err
		}
		switch kind {
		case 0x00: // function: type index
			_, err = r.u32()
		case 0x01: // table: reference type, limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 0x02: // memory: limits
			err = r.limits()
		case 0x03: // global: value type, mutability
			globals++
			_, err = r.bytes(2)
		case 0x04: // tag: attribute, type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return 0, fmt.Errorf("metering: unknown import kind 0x%02x at offset %d", kind, at)
		}
		if err != nil {
			return 0, err
		}
	}
	if r.off != len(content) {
		return 0, fmt.Errorf("metering: %d stray bytes at the end of the import section at offset %d", len(content)-r.off, r.pos())
	}
	return globals, nil
}

// checkExports refuses an export section that already exports
// MeterExport.
func checkExports(content []byte, base int) error {
	return eachExport(content, base, "metering", func(name string, _ byte, at int) error {
		if name == MeterExport {
			return fmt.Errorf("metering: the module already exports %q (offset %d), the name of the work counter", MeterExport, at)
		}
		return nil
	})
}

// eachExport calls fn with each export of an export section's content
// (at offset base in the module): its name, its kind (0x00 a function,
// 0x03 a global) and its offset; it stops at fn's first error. what
// names the reader in the error for stray bytes at the section's end.
func eachExport(content []byte, base int, what string, fn func(name string, kind byte, at int) error) error {
	r := &reader{b: content, base: base}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		at := r.pos()
		l, err := r.u32()
		if err != nil {
			return err
		}
		name, err := r.bytes(int(l))
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
		if err := fn(string(name), kind, at); err != nil {
			return err
		}
	}
	if r.off != len(content) {
		return fmt.Errorf("%s: %d stray bytes at the end of the export section at offset %d", what, len(content)-r.off, r.pos())
	}
	return nil
}

// Kinds of control frame.
const (
	frameFunc = iota
	frameBlock
	frameLoop
	frameIf
)

// control is one open block, loop, if or function body.
type control struct {
	kind     int
	id       int32 // index in meterer.ends
	header   int32 // loop: its header segment
	cond     int32 // if: the segment that ended with the if, -1 when dead
	then     int32 // if: the then arm's first segment
	hasElse  bool
	branched bool // a live br or br_if (or a trampoline) leaves to its end
	table    bool // a live br_table leaves to its end (or its header)
	simple   bool // a branch to its label carries no values
}

// segment is a straight-line run of instructions (see the top of this
// file). A real segment charges at its head; a virtual one is charged in
// advance by the segments that lead to it.
type segment struct {
	at    int   // body offset of its head; -1 for a trampoline
	own   int64 // instructions in it
	next  int32 // the segment its end leads to unconditionally, or on the side of a conditional it charges in advance; -1 none
	sub   int32 // the segment whose advance charge it takes back (after the conditional that made it), -1 none
	real  bool
	state uint8 // 0 new, 1 being walked, 2 done (its total is known)
	total int64 // virtual: own plus the totals it leads to
}

// pending is a branch to the end of a block or if whose segment is not
// known yet: from charges it in advance, sub (if not -1) takes it back.
type pending struct {
	frame     int32
	from, sub int32
}

// flush is a body offset before whose instruction (a call, a return) the
// counting local is added to the global.
type flush struct {
	at   int
	call bool
}

// table is a br_table rewritten to go through trampolines (see
// meterer.brTable): at..end are its bytes in the body, labels its
// distinct targets, tramp their trampolines' segments, and remap each of
// its entries as a position in labels.
type table struct {
	at, end int
	labels  []uint32
	tramp   []int32
	remap   []uint32
}

// meterer rewrites function bodies; its slices are reused across bodies.
type meterer struct {
	counter        []byte // the counter's global index, LEB128
	plain          bool   // meterModuleWith
	types          []funcType
	funcs          []uint32
	newTypes       [][]byte // types to append to the type section
	trampolineType int64    // the index of trampolineType among the types; -1 until needed

	local    []byte // the body's counting local, LEB128
	stack    []control
	segs     []segment
	ends     []int32 // per frame id: the segment after its end, -1 none
	pending  []pending
	tables   []table
	flushes  []flush          // where to flush, in body order
	loops    bool             // the body branches back to a loop header
	labels   []uint32         // the br_table being read
	distinct map[uint32]int32 // its distinct labels, by position
}

// code rewrites a code section whose content starts at offset base of
// the module.
func (m *meterer) code(content []byte, base int) ([]byte, error) {
	r := &reader{b: content, base: base}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if int(n) != len(m.funcs) {
		return nil, fmt.Errorf("metering: %d function bodies for %d functions at offset %d", n, len(m.funcs), base)
	}
	out := make([]byte, 0, len(content)+len(content)/4)
	out = appendU32(out, n)
	var body []byte
	for i := range n {
		at := r.pos()
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		start := r.off
		b, err := r.bytes(int(size))
		if err != nil {
			return nil, fmt.Errorf("metering: function body %d at offset %d: %w", i, at, err)
		}
		body, err = m.body(body[:0], b, base+start, m.types[m.funcs[i]])
		if err != nil {
			return nil, err
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.off != len(content) {
		return nil, fmt.Errorf("metering: %d stray bytes at the end of the code section at offset %d", len(content)-r.off, r.pos())
	}
	return out, nil
}

// body appends to out the metered form of function body b (locals and
// expression) of type ft that starts at offset base of the module.
//
// It cuts the body into segments and records how control flows between
// them (which segment leads to which, unconditionally or on one side of
// a conditional); settle then decides which are virtual, and emit writes
// the charges, flushes and trampolines.
func (m *meterer) body(out, b []byte, base int, ft funcType) ([]byte, error) {
	r := &reader{b: b, base: base}
	groups, err := r.u32()
	if err != nil {
		return nil, err
	}
	locals := uint64(ft.params)
	for range groups {
		k, err := r.u32()
		if err != nil {
			return nil, err
		}
		locals += uint64(k)
		at := r.pos()
		v, err := r.byte()
		if err != nil {
			return nil, err
		}
		if !valueType(v) {
			return nil, fmt.Errorf("metering: unknown value type 0x%02x at offset %d", v, at)
		}
	}
	if locals >= 50000 {
		return nil, fmt.Errorf("metering: function body at offset %d has %d locals, no room for the counter's", base, locals)
	}
	exprStart := r.off
	m.local = appendU32(m.local[:0], uint32(locals))
	m.stack, m.segs, m.ends, m.pending, m.tables, m.flushes = m.stack[:0], m.segs[:0], m.ends[:0], m.pending[:0], m.tables[:0], m.flushes[:0]
	m.loops = false
	newSeg := func(real bool) int32 {
		m.segs = append(m.segs, segment{at: r.off, next: -1, sub: -1, real: real || m.plain})
		return int32(len(m.segs) - 1)
	}
	push := func(c control) {
		c.id = int32(len(m.ends))
		m.ends = append(m.ends, -1)
		m.stack = append(m.stack, c)
	}
	push(control{kind: frameFunc, simple: len(ft.results) == 0})
	cur := newSeg(true) // the function's entry
	live := true        // whether control reaches the current instruction
	for len(m.stack) > 0 {
		start, at := r.off, r.pos() // in the body, in the module
		op, err := r.byte()
		if err != nil {
			return nil, fmt.Errorf("metering: function body at offset %d ends before its last end: %w", base, err)
		}
		// Structure (block, loop, end) and nop compile to nothing and
		// count nothing.
		if live && op != 0x01 && op != 0x02 && op != 0x03 && op != 0x0B {
			m.segs[cur].own++
		}
		switch op {
		case 0x00: // unreachable
			live = false
		case 0x0F: // return
			m.flushes = append(m.flushes, flush{at: start})
			live = false
		case 0x01, 0x1A, 0x1B, 0xD1: // nop, drop, select, ref.is_null
		case 0x02, 0x03, 0x04: // block, loop, if
			bt, err := r.blockType()
			if err != nil {
				return nil, err
			}
			if len(m.stack) >= 1<<16 {
				return nil, fmt.Errorf("metering: blocks nested deeper than %d at offset %d", 1<<16, at)
			}
			switch op {
			case 0x02:
				push(control{kind: frameBlock, simple: bt == 0x40})
			case 0x03:
				h := newSeg(false)
				if live {
					m.segs[cur].next = h
				}
				push(control{kind: frameLoop, header: h, simple: bt != 0}) // a loop's label takes its parameters
				cur, live = h, true
			case 0x04:
				c := control{kind: frameIf, cond: -1, simple: bt == 0x40}
				if live {
					c.cond = cur
				}
				c.then = newSeg(true)
				push(c)
				cur, live = c.then, true
			}
		case 0x05: // else
			top := &m.stack[len(m.stack)-1]
			if top.kind != frameIf || top.hasElse {
				return nil, fmt.Errorf("metering: else outside an if at offset %d", at)
			}
			if live {
				m.pending = append(m.pending, pending{frame: top.id, from: cur, sub: -1})
			}
			top.hasElse = true
			e := newSeg(false)
			if top.cond >= 0 {
				m.segs[top.cond].next = e
				m.segs[top.then].sub = e
			}
			cur, live = e, true
		case 0x0B: // end
			top := m.stack[len(m.stack)-1]
			m.stack = m.stack[:len(m.stack)-1]
			switch {
			case top.kind == frameFunc, top.kind == frameLoop:
				// The code after a loop is reached only by falling
				// through: it goes on in the current segment.
			case top.kind == frameBlock && !top.branched && !top.table:
				// Likewise the code after a block no branch leaves.
			default:
				e := newSeg(top.table)
				if live {
					m.segs[cur].next = e
				}
				if top.kind == frameIf && !top.hasElse && top.cond >= 0 {
					m.segs[top.cond].next = e
					m.segs[top.then].sub = e
				}
				m.ends[top.id] = e
				cur, live = e, true
			}
		case 0x0C, 0x0D: // br, br_if
			l, err := r.u32()
			if err != nil {
				return nil, err
			}
			f, err := m.target(l, at)
			if err != nil {
				return nil, err
			}
			m.loops = m.loops || f.kind == frameLoop
			if !live {
				break
			}
			after := int32(-1)
			if op == 0x0D {
				after = newSeg(true)
			}
			if f.kind == frameLoop {
				m.segs[cur].next = f.header
				if after >= 0 {
					m.segs[after].sub = f.header
				}
			} else {
				f.branched = true
				m.pending = append(m.pending, pending{frame: f.id, from: cur, sub: after})
			}
			if op == 0x0C {
				live = false
			} else {
				cur = after
			}
		case 0x0E: // br_table
			n, err := r.u32()
			if err != nil {
				return nil, err
			}
			m.labels = m.labels[:0]
			for range uint64(n) + 1 {
				l, err := r.u32()
				if err != nil {
					return nil, err
				}
				f, err := m.target(l, at)
				if err != nil {
					return nil, err
				}
				m.loops = m.loops || f.kind == frameLoop
				m.labels = append(m.labels, l)
			}
			if live {
				m.brTable(start, r.off)
			}
			live = false
		case 0x10: // call
			m.flushes = append(m.flushes, flush{at: start, call: true})
			_, err = r.u32()
		case 0x11: // call_indirect: type index, table index
			m.flushes = append(m.flushes, flush{at: start, call: true})
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0xD2:
			// local.get/set/tee, global.get/set, table.get/set,
			// ref.func: one index
			_, err = r.u32()
		case 0x1C: // select with types
			var n uint32
			if n, err = r.u32(); err == nil {
				_, err = r.bytes(int(n))
			}
		case 0x3F, 0x40: // memory.size, memory.grow: memory index
			_, err = r.u32()
		case 0x41: // i32.const
			err = r.skipLEB(5)
		case 0x42: // i64.const
			err = r.skipLEB(10)
		case 0x43: // f32.const
			_, err = r.bytes(4)
		case 0x44: // f64.const
			_, err = r.bytes(8)
		case 0xD0: // ref.null: reference type
			_, err = r.byte()
		case 0xFC:
			err = r.miscOp(at)
		case 0xFD:
			err = r.vectorOp(at)
		default:
			switch {
			case op >= 0x28 && op <= 0x3E: // loads and stores: memarg
				err = r.memarg()
			case op >= 0x45 && op <= 0xC4: // numeric, conversions, sign extension
			default:
				return nil, fmt.Errorf("metering: unknown opcode 0x%02x at offset %d", op, at)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("metering: %d bytes after the last end of the function body at offset %d", len(b)-r.off, r.pos())
	}
	for _, p := range m.pending {
		e := m.ends[p.frame]
		m.segs[p.from].next = e
		if p.sub >= 0 {
			m.segs[p.sub].sub = e
		}
	}
	m.settle()
	if m.plain {
		return m.emitPlain(out, b), nil
	}
	return m.emit(out, b, exprStart, ft), nil
}

// brTable records the control flow of a live br_table whose bytes are
// at..end in the body, its labels in m.labels.
//
// Its targets cannot be charged in advance by the segment before it,
// which does not know where it goes. So a br_table whose targets take
// no values goes through trampolines instead: it is rewritten into k
// nested blocks of type [i32] -> [] (passing the index inward), the
// br_table inside them to the innermost k labels, and after the end of
// each block a trampoline that charges its target in advance and
// branches on to it:
//
//	block (type $i32) ... block (type $i32)   ;; k blocks
//	  br_table 0 1 ...                          ;; entries mapped to the blocks
//	end  charge  br (label of target 0 + k-1)
//	...
//	end  charge  br (label of target k-1)
//
// The trampolines are real segments; the targets become ordinary
// candidates for virtual ones. Other tables make their targets real.
func (m *meterer) brTable(at, end int) {
	if m.distinct == nil {
		m.distinct = map[uint32]int32{}
	}
	clear(m.distinct)
	simple := !m.plain
	var labels []uint32
	for _, l := range m.labels {
		if _, ok := m.distinct[l]; !ok {
			m.distinct[l] = int32(len(labels))
			labels = append(labels, l)
		}
		simple = simple && m.stack[len(m.stack)-1-int(l)].simple
	}
	if !simple || len(labels) > maxTrampolines {
		for _, l := range labels {
			f := &m.stack[len(m.stack)-1-int(l)]
			if f.kind == frameLoop {
				m.segs[f.header].real = true
			} else {
				f.table = true
			}
		}
		return
	}
	if m.trampolineType < 0 {
		m.trampolineType = m.typeIndex(trampolineType)
	}
	t := table{at: at, end: end, labels: labels, tramp: make([]int32, len(labels)), remap: make([]uint32, len(m.labels))}
	for i, l := range m.labels {
		t.remap[i] = uint32(m.distinct[l])
	}
	for j, l := range labels {
		m.segs = append(m.segs, segment{at: -1, next: -1, sub: -1, real: true})
		s := int32(len(m.segs) - 1)
		t.tramp[j] = s
		f := &m.stack[len(m.stack)-1-int(l)]
		if f.kind == frameLoop {
			m.segs[s].next = f.header
		} else {
			f.branched = true
			m.pending = append(m.pending, pending{frame: f.id, from: s, sub: -1})
		}
	}
	m.tables = append(m.tables, t)
}

// typeIndex returns the index of the encoded function type t among the
// new types, appending it unless an earlier call did.
func (m *meterer) typeIndex(t []byte) int64 {
	for i, nt := range m.newTypes {
		if string(nt) == string(t) {
			return int64(len(m.types) + i)
		}
	}
	m.newTypes = append(m.newTypes, t)
	return int64(len(m.types) + len(m.newTypes) - 1)
}

// target returns the frame that a branch to label l leaves (or, for a
// loop, repeats).
func (m *meterer) target(l uint32, at int) (*control, error) {
	if uint64(l) >= uint64(len(m.stack)) {
		return nil, fmt.Errorf("metering: branch to label %d at offset %d, only %d blocks are open", l, at, len(m.stack))
	}
	return &m.stack[len(m.stack)-1-int(l)], nil
}

// settle makes one segment real on every cycle of virtual segments (a
// loop whose every segment is virtual), then computes the totals of the
// virtual ones. Each segment leads to at most one other (next), so the
// virtual segments form chains, walked once each.
func (m *meterer) settle() {
	segs := m.segs
	var walk []int32
	for i := range segs {
		walk = walk[:0]
		for s := int32(i); s >= 0 && !segs[s].real && segs[s].state == 0; s = segs[s].next {
			segs[s].state = 1
			walk = append(walk, s)
			if n := segs[s].next; n >= 0 && segs[n].state == 1 {
				segs[n].real = true // a cycle: it charges at its head
			}
		}
		for j := len(walk) - 1; j >= 0; j-- {
			s := walk[j]
			segs[s].state = 2
			segs[s].total = segs[s].own + m.ahead(s)
		}
	}
}

// ahead is what segment s charges in advance: the total of the virtual
// segment it leads to.
func (m *meterer) ahead(s int32) int64 {
	if n := m.segs[s].next; n >= 0 && !m.segs[n].real {
		return m.segs[n].total
	}
	return 0
}

// charge is what real segment s adds to the count at its head.
func (m *meterer) charge(s int32) int64 {
	n := m.segs[s].own + m.ahead(s)
	if sub := m.segs[s].sub; sub >= 0 && !m.segs[sub].real {
		n -= m.segs[sub].total
	}
	return n
}

// appendCharge appends the code that adds n to the function's counting
// local.
func (m *meterer) appendCharge(out []byte, n int64) []byte {
	out = append(out, 0x20) // local.get
	out = append(out, m.local...)
	out = append(out, 0x42) // i64.const
	out = appendS64(out, n)
	out = append(out, 0x7C, 0x21) // i64.add, local.set
	return append(out, m.local...)
}

// appendFlush appends the code that adds the counting local to the
// global and zeroes it.
func (m *meterer) appendFlush(out []byte) []byte {
	out = append(out, 0x23) // global.get
	out = append(out, m.counter...)
	out = append(out, 0x20) // local.get
	out = append(out, m.local...)
	out = append(out, 0x7C, 0x24) // i64.add, global.set
	out = append(out, m.counter...)
	out = append(out, 0x42, 0x00, 0x21) // i64.const 0, local.set
	return append(out, m.local...)
}

// emit appends the rewritten body of type ft: b's locals and the
// counting local, then b's expression, from exprStart, wrapped in a
// block of ft's results and with the charges of the real segments, the
// flushes and the br_tables through trampolines.
func (m *meterer) emit(out, b []byte, exprStart int, ft funcType) []byte {
	// Locals: one more group, of one i64.
	groups, _ := (&reader{b: b}).u32() // read by body
	out = appendU32(out, groups+1)
	out = append(out, b[lebLen(b):exprStart]...)
	out = append(out, 0x01, 0x7E)
	// The wrapping block.
	out = append(out, 0x02)
	switch len(ft.results) {
	case 0:
		out = append(out, 0x40)
	case 1:
		out = append(out, ft.results[0])
	default:
		t := append([]byte{0x60, 0x00}, appendU32(nil, uint32(len(ft.results)))...)
		out = appendS64(out, m.typeIndex(append(t, ft.results...)))
	}
	last, t, f := exprStart, 0, 0
	// upTo appends b up to offset at with the tables and flushes before
	// it.
	upTo := func(at int) {
		for {
			switch {
			case f < len(m.flushes) && m.flushes[f].call && !m.loops:
				f++ // see flushes
			case t < len(m.tables) && m.tables[t].at < at && (f == len(m.flushes) || m.tables[t].at < m.flushes[f].at):
				out = append(out, b[last:m.tables[t].at]...)
				out, last = m.emitTable(out, b, &m.tables[t])
				t++
			case f < len(m.flushes) && m.flushes[f].at < at:
				out = append(out, b[last:m.flushes[f].at]...)
				last = m.flushes[f].at
				out = m.appendFlush(out)
				f++
			default:
				out = append(out, b[last:at]...)
				last = at
				return
			}
		}
	}
	for i := range m.segs {
		s := &m.segs[i]
		if !s.real || s.at < 0 {
			continue
		}
		if n := m.charge(int32(i)); n != 0 {
			upTo(s.at)
			out = m.appendCharge(out, n)
		}
	}
	upTo(len(b))
	// b's last end closed the wrapping block; flush, and end the body.
	out = m.appendFlush(out)
	return append(out, 0x0B)
}

// emitTable appends table t through its trampolines (see brTable) and
// returns where b goes on.
func (m *meterer) emitTable(out, b []byte, t *table) ([]byte, int) {
	k := len(t.labels)
	for range k {
		out = append(out, 0x02) // block (type $i32)
		out = appendS64(out, m.trampolineType)
	}
	out = append(out, 0x0E) // br_table
	out = appendU32(out, uint32(len(t.remap)-1))
	for _, j := range t.remap {
		out = appendU32(out, j)
	}
	for j := range k {
		out = append(out, 0x0B) // end
		if n := m.charge(t.tramp[j]); n != 0 {
			out = m.appendCharge(out, n)
		}
		out = append(out, 0x0C) // br
		out = appendU32(out, t.labels[j]+uint32(k-1-j))
	}
	return out, t.end
}

// emitPlain appends body b with every segment adding its count to the
// global at its head (meterModuleWith).
func (m *meterer) emitPlain(out, b []byte) []byte {
	last := 0
	for _, s := range m.segs {
		if s.own == 0 {
			continue
		}
		out = append(out, b[last:s.at]...)
		last = s.at
		out = append(out, 0x23) // global.get
		out = append(out, m.counter...)
		out = append(out, 0x42) // i64.const
		out = appendS64(out, s.own)
		out = append(out, 0x7C, 0x24) // i64.add, global.set
		out = append(out, m.counter...)
	}
	return append(out, b[last:]...)
}

// reader decodes the binary format. off is relative to b; base+off is the
// offset in the module, for messages. Every method fails with a message
// naming that offset.
type reader struct {
	b    []byte
	off  int
	base int
}

func (r *reader) pos() int { return r.base + r.off }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("metering: unexpected end at offset %d", r.pos())
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, fmt.Errorf("metering: %d bytes at offset %d run past the end", n, r.pos())
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}

// u32 reads an unsigned LEB128 number of at most 32 bits.
func (r *reader) u32() (uint32, error) {
	at := r.pos()
	var v uint64
	for i := range 5 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7F) << (7 * i)
		if c&0x80 == 0 {
			if v > 0xFFFFFFFF {
				return 0, fmt.Errorf("metering: number at offset %d overflows 32 bits", at)
			}
			return uint32(v), nil
		}
	}
	return 0, fmt.Errorf("metering: number at offset %d is longer than 5 bytes", at)
}

// skipLEB skips a LEB128 number of at most max bytes.
func (r *reader) skipLEB(max int) error {
	at := r.pos()
	for range max {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return fmt.Errorf("metering: number at offset %d is longer than %d bytes", at, max)
}

// limits skips a table's or memory's limits: flags, minimum and maximum
// (64-bit numbers for memory64).
func (r *reader) limits() error {
	at := r.pos()
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 0x07 {
		return fmt.Errorf("metering: unknown limits flags 0x%02x at offset %d", flags, at)
	}
	if err := r.skipLEB(10); err != nil {
		return err
	}
	if flags&1 != 0 {
		return r.skipLEB(10)
	}
	return nil
}

// blockType skips a block type: empty (0x40), a value type or a type
// index (a signed 33-bit number). It returns the byte of the first two,
// 0 for a type index.
func (r *reader) blockType() (byte, error) {
	if r.off >= len(r.b) {
		_, err := r.byte()
		return 0, err
	}
	at := r.pos()
	c := r.b[r.off]
	if c == 0x40 || valueType(c) {
		r.off++
		return c, nil
	}
	if c&0x80 == 0 && c&0x40 != 0 {
		return 0, fmt.Errorf("metering: unknown block type 0x%02x at offset %d", c, at)
	}
	return 0, r.skipLEB(5)
}

// memarg skips a memory argument: alignment (with bit 6, a memory index
// follows) and offset.
func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return r.skipLEB(10)
}

// miscOp skips the rest of a 0xFC instruction at offset at: saturating
// truncation, bulk memory and table instructions.
func (r *reader) miscOp(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // i32/i64.trunc_sat_f32/f64_s/u
		return nil
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy: two indexes
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err = r.u32()
		return err
	case sub <= 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill: one index
		_, err = r.u32()
		return err
	}
	return fmt.Errorf("metering: unknown opcode 0xfc 0x%02x at offset %d", sub, at)
}

// vectorOp skips the rest of a 0xFD (SIMD) instruction at offset at.
func (r *reader) vectorOp(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 92, sub == 93: // v128 loads and stores
		return r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		_, err = r.bytes(16)
		return err
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		_, err = r.byte()
		return err
	case sub >= 84 && sub <= 91: // load_lane, store_lane
		if err := r.memarg(); err != nil {
			return err
		}
		_, err = r.byte()
		return err
	case sub <= 0xFF && !reservedVectorOp(sub):
		return nil
	}
	return fmt.Errorf("metering: unknown opcode 0xfd 0x%02x at offset %d", sub, at)
}

// reservedVectorOp reports the SIMD opcodes below 0x100 that the
// specification leaves unused.
func reservedVectorOp(sub uint32) bool {
	switch sub {
	case 0x9A, 0xA2, 0xA5, 0xA6, 0xAF, 0xB0, 0xB2, 0xB3, 0xB4, 0xBB,
		0xC2, 0xC5, 0xC6, 0xCF, 0xD0, 0xD2, 0xD3, 0xD4, 0xE2, 0xEE:
		return true
	}
	return false
}

// lebLen is the length of the LEB128 number at the start of b (checked
// by the caller).
func lebLen(b []byte) int {
	for i, c := range b {
		if c&0x80 == 0 {
			return i + 1
		}
	}
	return len(b)
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
