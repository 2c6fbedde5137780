package job

import (
	"errors"
	"fmt"
)

// Sentinel errors of package job; compare with errors.Is.
var (
	// ErrManifest marks every problem in a manifest (see ManifestError).
	ErrManifest = errors.New("job: bad manifest")
	// ErrBadDigest is returned for a string that is not 64 hex digits.
	ErrBadDigest = errors.New("job: bad SHA-256 digest")
	// ErrExpr marks a derive expression that does not parse or evaluate.
	ErrExpr = errors.New("job: bad expression")
	// ErrInputData marks a ManifestError about the content of a split
	// input: a file that cannot be cut as its split.format says (an
	// unclosed quote, a ragged CSV record, a chunks row longer than the
	// task's memory limit). The data is at fault, not the manifest's text.
	ErrInputData = errors.New("job: input data cannot be split")
	// ErrNotManifest marks a ManifestError for a file that cannot be a
	// manifest, which is UTF-8 text: a program, an archive, an image,
	// other binary data. Its Msg says what the file is.
	ErrNotManifest = errors.New("job: not a manifest")
	// ErrProgramNotManifest marks a ManifestError for a WebAssembly
	// program given where a manifest belongs; it also matches
	// ErrNotManifest.
	ErrProgramNotManifest = fmt.Errorf("%w: a WebAssembly program", ErrNotManifest)
)

// Sentinel errors of the merge rules (Merger); compare with errors.Is.
var (
	// ErrMergeSpec marks a [[merge]] entry that MergeSpec.Validate or
	// NewMerger rejects.
	ErrMergeSpec = errors.New("job: bad merge spec")
	// ErrBadResult marks a task result that does not fit the merge entries
	// (see ResultError): the task failed, the Merger is unchanged.
	ErrBadResult = errors.New("job: bad task result")
	// ErrTaskIndex is returned for a negative task index, or by
	// Merger.Close for results beyond the task count.
	ErrTaskIndex = errors.New("job: task index out of range")
	// ErrDuplicateTask is returned by Merger.Add for a task index that an
	// ordered sink already has a result or skip for.
	ErrDuplicateTask = errors.New("job: task result added twice")
	// ErrMissingTasks is returned by Merger.Close when tasks below the
	// total have neither a result nor a skip.
	ErrMissingTasks = errors.New("job: task results missing")
	// ErrMergerClosed is returned by Merger.Add and a second
	// Merger.Close after Close.
	ErrMergerClosed = errors.New("job: merger closed")
	// ErrSinkWrite marks a failed write to an ordered sink; it sticks.
	ErrSinkWrite = errors.New("job: write to merge sink failed")
	// ErrNotMergeable is returned by Merger.Merge, MarshalBinary and
	// UnmarshalBinary for a Merger with an ordered entry (collect,
	// concat), whose output is a stream, not a state.
	ErrNotMergeable = errors.New("job: ordered merge entries cannot be merged")
	// ErrMergeMismatch is returned when two merge states come from
	// different specs.
	ErrMergeMismatch = errors.New("job: merge states of different specs")
	// ErrBadMergeState marks a MarshalBinary encoding that does not
	// decode (truncated, out of range or not canonical).
	ErrBadMergeState = errors.New("job: bad merge state")
)
