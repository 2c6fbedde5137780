package worker

import "errors"

// A trap's failure in the determinism profile (docs/determinism.md,
// "Traps"): every host names a WebAssembly trap with one of these words,
// whatever its engine calls it, so that a task that traps fails with the
// same bytes on wazero and in a browser and its failure verifies by
// quorum across both. The classes are as fine as every engine can tell
// them apart: V8 reports a float-to-integer conversion of NaN and of a
// value out of range alike, and a null table entry and a signature
// mismatch alike, so the profile does too. The trap kinds are those of
// the WebAssembly core specification, 2.0, §4.4 ("Execution": the
// instructions that trap).
const (
	// TrapUnreachable: an unreachable instruction ran.
	TrapUnreachable = "unreachable"
	// TrapDivideByZero: an integer division or remainder by zero.
	TrapDivideByZero = "integer divide by zero"
	// TrapIntegerOverflow: an integer division whose quotient does not fit
	// (the most negative value divided by -1), or a float-to-integer
	// conversion of NaN or of a value out of the integer's range.
	TrapIntegerOverflow = "integer overflow or invalid conversion to integer"
	// TrapMemoryBounds: a load, store or bulk memory operation outside the
	// linear memory.
	TrapMemoryBounds = "out of bounds memory access"
	// TrapIndirectCall: call_indirect (or a table access) through an index
	// past the table's end, a null entry, or a function of another type.
	TrapIndirectCall = "invalid table access or indirect call"
	// TrapStackExhausted: the call stack ran out (its depth is the
	// engine's, so a deep but finite recursion may trap on one host and
	// not on another: programs must not recurse without bound).
	TrapStackExhausted = "call stack exhausted"
)

// trapPrefix starts the message of a trap named by the profile.
const trapPrefix = "wasm trap: "

// wazeroTraps maps wazero's words for a trap (its wasmruntime errors,
// which it wraps in "wasm error: %w\nwasm stack trace: ...") to the
// profile's.
var wazeroTraps = map[string]string{
	"unreachable":                   TrapUnreachable,
	"integer divide by zero":        TrapDivideByZero,
	"integer overflow":              TrapIntegerOverflow,
	"invalid conversion to integer": TrapIntegerOverflow,
	"out of bounds memory access":   TrapMemoryBounds,
	"invalid table access":          TrapIndirectCall,
	"indirect call type mismatch":   TrapIndirectCall,
	"stack overflow":                TrapStackExhausted,
}

// trapFailure is the failure of a call that ended with err, a trap of the
// engine: its message is "wasm trap: " and the profile's words where err
// wraps one of wazero's traps, with the engine's own words (its stack
// trace) in Trace; otherwise err's own words, clipped.
func trapFailure(err error) *Failure {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if w, ok := wazeroTraps[e.Error()]; ok {
			return &Failure{Kind: FailureTrap, Message: trapPrefix + w, Trace: clip(err.Error())}
		}
	}
	return &Failure{Kind: FailureTrap, Message: clip(err.Error())}
}
