// Package job describes a unit of work: a manifest names a WebAssembly
// program, a split rule that cuts the work into tasks, merge rules that fold
// task results into fixed-size accumulators, and a participation policy.
//
// A job is named by the SHA-256 of its canonical encoding (deterministic
// CBOR, RFC 8949 section 4.2.1), which names the program and every input by
// hash, so the same work written differently has the same ID and any change
// gives a new one. Each task carries its own seed derived from the job ID and
// its index, so any peer recomputes any task to the same bytes.
//
// The package is pure: apart from reading a manifest and hashing the files it
// names, it does no I/O. Accumulators are not safe for concurrent use; their
// owner serialises calls.
package job
