package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/fxamacker/cbor/v2"

	"idlepool/job/fold"
)

// Digest is a SHA-256 digest (FIPS 180-4), 32 bytes.
type Digest [32]byte

// String returns the digest as 64 lowercase hex digits.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// ParseDigest parses 64 hex digits. It returns ErrBadDigest otherwise.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("%w: %q", ErrBadDigest, s)
	}
	copy(d[:], b)
	return d, nil
}

// ID names a job: the SHA-256 of its canonical encoding.
type ID = Digest

// InputRef is one named input file of a job: where it is on this machine,
// its size in bytes and its SHA-256. Only the digest enters the job ID.
type InputRef struct {
	Path   string
	Size   int64
	SHA256 Digest
}

// Chunk is one piece of a chunked input, whole rows (CSV records or lines,
// per split.format): its byte range in the input file and the SHA-256 of
// its bytes.
type Chunk struct {
	Offset int64
	Length int64
	SHA256 Digest
}

// Job is a planned job: a validated manifest whose program and inputs are
// hashed, with its content-derived ID and everything needed to produce any
// task. A Job is immutable once planned and safe for concurrent use.
type Job struct {
	Manifest  *Manifest
	ID        ID
	Program   InputRef
	Inputs    map[string]InputRef
	Canonical []byte // the canonical CBOR encoding that ID hashes
	// KnownAnswers is the [verify] known_answers file (zero when none):
	// not part of the job's encoding (see Verify.KnownAnswers); a job
	// rebuilt from its encoding has it only after LoadKnownAnswers.
	KnownAnswers InputRef
	known        map[int64]knownAnswer // task index → known answer (known.go)

	numTasks int64
	rows     int     // kfold: data rows of the split input
	chunks   []Chunk // chunks: the pieces of the split input
	header   string  // chunks with header: the first row, without its line break
	gridAxes []gridAxis
}

type gridAxis struct {
	name   string
	values []any
}

// Plan hashes the manifest's program and inputs, computes the job ID and
// prepares the split. It reads every file the manifest names once (the
// kfold input is read again to count its rows; the chunked input is
// scanned for row boundaries as it is hashed). Errors name the file and
// what is wrong; a missing file, and a split input that cannot be cut as
// its split.format says (with the line), is a *ManifestError.
func Plan(m *Manifest) (*Job, error) { return planStored(m, nil) }

// planStored is Plan; stored maps a file's path to its digest where a
// content-addressed store vouches for it (FromCanonicalStored): that file
// is not hashed again.
func planStored(m *Manifest, stored map[string]Digest) (*Job, error) {
	j := &Job{Manifest: m, Inputs: map[string]InputRef{}}
	hashFile := func(m *Manifest, field, path string) (InputRef, error) {
		if d, ok := stored[filepath.Clean(path)]; ok {
			st, err := os.Stat(path)
			if err != nil {
				if os.IsNotExist(err) {
					return InputRef{}, m.fail(field, "file %s does not exist", path)
				}
				return InputRef{}, m.fail(field, "%v", err)
			}
			return InputRef{Path: path, Size: st.Size(), SHA256: d}, nil
		}
		return hashFile(m, field, path)
	}
	var err error
	if j.Program, err = hashFile(m, "program", m.Program); err != nil {
		return nil, err
	}
	if err := checkWasm(m, m.Program); err != nil {
		return nil, err
	}
	for name, p := range m.Inputs {
		if m.Split.Rule == "chunks" && name == m.Split.Input {
			continue // hashed while chunking, below
		}
		if j.Inputs[name], err = hashFile(m, "inputs."+name, p); err != nil {
			return nil, err
		}
	}
	s := m.Split
	switch s.Rule {
	case "range", "replicas":
		j.numTasks = s.Tasks
	case "grid":
		names := make([]string, 0, len(s.Grid))
		for name := range s.Grid {
			names = append(names, name)
		}
		sort.Strings(names)
		j.numTasks = 1
		for _, name := range names {
			vals, err := gridAxisValues(s.Grid[name])
			if err != nil {
				return nil, m.fail("split.grid."+name, "%v", err)
			}
			j.gridAxes = append(j.gridAxes, gridAxis{name, vals})
			j.numTasks *= int64(len(vals))
		}
	case "kfold":
		if j.rows, err = countRows(m.Inputs[s.Input], s.Format); err != nil {
			return nil, m.failData("inputs."+s.Input, err)
		}
		if j.rows < s.K {
			return nil, m.fail("split.k", "input %q has %d data rows, fewer than k = %d folds", s.Input, j.rows, s.K)
		}
		j.numTasks = int64(s.K)
	case "chunks":
		ref, chunks, header, err := chunkFile(m.Inputs[s.Input], s.ChunkBytes, s.Header, s.Format, int64(m.Policy.MemoryMiB)<<20)
		if err != nil {
			return nil, m.failData("inputs."+s.Input, err)
		}
		j.Inputs[s.Input], j.chunks, j.header = ref, chunks, header
		j.numTasks = int64(len(chunks))
		if j.numTasks == 0 {
			return nil, m.fail("inputs."+s.Input, "no data to split: the file has no rows after the header")
		}
	}
	if err := j.planKnownAnswers(); err != nil {
		return nil, err
	}
	j.Canonical, err = j.canonical()
	if err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	j.ID = sha256.Sum256(j.Canonical)
	return j, nil
}

// NumTasks is how many tasks the job has (at least 1).
func (j *Job) NumTasks() int64 { return j.numTasks }

// Chunks returns the chunks of a chunks-split job (nil for other rules).
// The caller must not modify the slice.
func (j *Job) Chunks() []Chunk { return j.chunks }

var canonicalEncMode = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// canonical returns the job's deterministic CBOR encoding (RFC 8949
// section 4.2.1, core deterministic: shortest forms, definite lengths, map
// keys sorted bytewise). It names the program and inputs by digest only,
// never by path, so moving files or reformatting the manifest keeps the ID.
func (j *Job) canonical() ([]byte, error) {
	m := j.Manifest
	inputs := map[string]any{}
	for name, ref := range j.Inputs {
		inputs[name] = ref.SHA256.String()
	}
	split := map[string]any{"rule": m.Split.Rule}
	s := m.Split
	switch s.Rule {
	case "range", "replicas":
		split["tasks"] = s.Tasks
	case "grid":
		split["grid"] = s.Grid
	case "kfold":
		split["k"], split["input"], split["shuffle"] = int64(s.K), s.Input, s.Shuffle
	case "chunks":
		split["input"], split["chunk_bytes"], split["header"] = s.Input, s.ChunkBytes, s.Header
	}
	if s.Format != s.baseFormat() && (s.Rule == "kfold" || s.Rule == "chunks") {
		split["format"] = s.Format // absent at the rule's first meaning: older IDs stay valid
	}
	if len(s.Params) > 0 {
		split["params"] = s.Params
	}
	merges := make([]any, len(m.Merge))
	for i, ms := range m.Merge {
		// Round-trip through JSON to get a plain, tag-named map.
		b, err := json.Marshal(ms)
		if err != nil {
			return nil, err
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, err
		}
		merges[i] = v
	}
	p := m.Policy
	doc := map[string]any{
		"idlepool":    int64(1), // version of this encoding
		"name":        m.Name,
		"description": m.Description,
		"program":     j.Program.SHA256.String(),
		"inputs":      inputs,
		"split":       split,
		"merge":       merges,
		"policy": map[string]any{
			"redundancy":       int64(p.Redundancy),
			"quorum":           int64(p.Quorum),
			"lease_timeout_ms": p.LeaseTimeout.Milliseconds(),
			"memory_mib":       int64(p.MemoryMiB),
			"time_limit_ms":    p.TimeLimit.Milliseconds(),
			"participants":     p.Participants,
		},
	}
	if len(m.Derive) > 0 {
		doc["derive"] = m.Derive
	}
	if m.Link != "" { // absent when not set: older IDs stay valid
		doc["link"] = m.Link
	}
	if r := m.Requirements; !r.IsZero() { // absent when empty: older IDs stay valid
		req := map[string]any{}
		switch {
		case r.GPU.Required():
			req["gpu"] = true
		case r.GPU.Optional():
			req["gpu"] = "optional"
		}
		if r.GPUMemoryMiB != 0 {
			req["gpu_memory_mib"] = r.GPUMemoryMiB
		}
		if r.GPUComputeCapability != "" {
			req["gpu_compute_capability"] = r.GPUComputeCapability
		}
		if r.MemoryMiB != 0 {
			req["memory_mib"] = r.MemoryMiB
		}
		if r.Prefer != "" {
			req["prefer"] = r.Prefer
		}
		doc["requirements"] = req
	}
	if p.TaskCost != 1 || p.CostParam != "" { // absent at the default: older IDs stay valid
		pol := doc["policy"].(map[string]any)
		pol["task_cost"] = p.TaskCost
		if p.CostParam != "" {
			pol["cost_param"] = p.CostParam
		}
	}
	if p.StdoutMiB != DefaultStdoutMiB && p.StdoutMiB != 0 { // absent at the default: older IDs stay valid
		doc["policy"].(map[string]any)["stdout_mib"] = int64(p.StdoutMiB)
	}
	if v := m.Verify.canonical(); v != nil {
		doc["verify"] = v
	}
	return canonicalEncMode.Marshal(doc)
}

// Seed derives a job's own seed: SHA-256 of the ASCII string
// "idlepool/job-seed/v1", a zero byte, and the 32-byte job ID.
func Seed(id ID) [32]byte {
	h := sha256.New()
	h.Write([]byte("idlepool/job-seed/v1\x00"))
	h.Write(id[:])
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// TaskSeed derives task index's seed: SHA-256 of the ASCII string
// "idlepool/task-seed/v1", a zero byte, the 32-byte job ID and the index as
// an 8-byte big-endian unsigned integer. Any peer recomputes it.
func TaskSeed(id ID, index int64) [32]byte {
	h := sha256.New()
	h.Write([]byte("idlepool/task-seed/v1\x00"))
	h.Write(id[:])
	var ix [8]byte
	binary.BigEndian.PutUint64(ix[:], uint64(index))
	h.Write(ix[:])
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// Seed64 is the first 8 bytes of a seed as a big-endian uint64: the form a
// program receives in its task JSON.
func Seed64(seed [32]byte) uint64 { return binary.BigEndian.Uint64(seed[:8]) }

// Seed64Hex is Seed64 written as 16 lowercase hex digits, zero-padded: the
// first 8 bytes of the seed in hex. Task JSON carries it beside the number
// for readers that parse JSON numbers as doubles, which hold integers
// exactly only up to 2^53.
func Seed64Hex(seed [32]byte) string { return hex.EncodeToString(seed[:8]) }

// Task is one independent piece of a job.
type Task struct {
	// Index is the task's position, 0..NumTasks-1.
	Index int64
	// Seed is TaskSeed(job ID, Index).
	Seed [32]byte
	// Params are split.params plus the rule's own per-task parameters.
	Params map[string]any
	// Inputs maps names to paths inside the sandbox (under InputMount).
	Inputs map[string]string
	// Chunk is the piece of the split input this task reads (chunks rule),
	// available inside the sandbox at Inputs["chunk"]; nil otherwise.
	Chunk *Chunk
}

// InputMount is where a program sees its input files, read-only.
const InputMount = "/input"

// ChunkPath is the sandbox path of a chunk with digest d.
func ChunkPath(d Digest) string { return InputMount + "/chunks/" + d.String() }

// Task returns task index (0 <= index < NumTasks). It panics on an index
// out of range, a programming error.
func (j *Job) Task(index int64) Task {
	j.mustHaveTask(index)
	t := Task{Index: index, Seed: TaskSeed(j.ID, index), Params: map[string]any{}, Inputs: map[string]string{}}
	s := j.Manifest.Split
	for k, v := range s.Params {
		t.Params[k] = v
	}
	for name := range j.Inputs {
		if s.Rule == "chunks" && name == s.Input {
			continue
		}
		t.Inputs[name] = InputMount + "/" + name
	}
	switch s.Rule {
	case "grid":
		rest := index
		for a := len(j.gridAxes) - 1; a >= 0; a-- {
			ax := j.gridAxes[a]
			n := int64(len(ax.values))
			t.Params[ax.name] = ax.values[rest%n]
			rest /= n
		}
	case "kfold":
		t.Params["k"] = int64(s.K)
		t.Params["fold"] = index
		t.Params["rows"] = int64(j.rows)
		t.Params["shuffle"] = s.Shuffle
		if s.Shuffle {
			t.Params["permutation_seed"] = Seed64(Seed(j.ID))
			t.Params["permutation_seed_hex"] = Seed64Hex(Seed(j.ID))
		}
	case "chunks":
		c := j.chunks[index]
		t.Chunk = &c
		t.Params["chunk_index"] = index
		t.Params["offset"] = c.Offset
		t.Params["length"] = c.Length
		t.Params["sha256"] = c.SHA256.String()
		if s.Header {
			t.Params["header"] = j.header
		}
		t.Inputs["chunk"] = ChunkPath(c.SHA256)
	}
	return t
}

// taskDoc is the JSON a program reads on stdin. Its fields are in sorted
// key order, as encoding/json writes struct fields in declaration order.
// The seed is given three ways: a JSON number (exact only for readers with
// 64-bit unsigned integers; most seeds are above 2^53, where a double
// rounds), and the same value as a decimal string and as 16 hex digits.
type taskDoc struct {
	Index       int64             `json:"index"`
	Inputs      map[string]string `json:"inputs"`
	Job         string            `json:"job"`
	Params      map[string]any    `json:"params"`
	Seed        uint64            `json:"seed"`
	SeedDecimal string            `json:"seed_decimal"`
	SeedHex     string            `json:"seed_hex"`
}

// TaskJSON returns the bytes a program reads on stdin for task index: a JSON
// object {"job", "index", "seed", "seed_decimal", "seed_hex", "params",
// "inputs"} with sorted keys, the same bytes on every machine. seed is
// Seed64 of the task seed as a number, seed_decimal the same as a decimal
// string and seed_hex as Seed64Hex.
func (j *Job) TaskJSON(t Task) []byte {
	s := Seed64(t.Seed)
	b, err := json.Marshal(taskDoc{Job: j.ID.String(), Index: t.Index, Seed: s,
		SeedDecimal: strconv.FormatUint(s, 10), SeedHex: Seed64Hex(t.Seed), Params: t.Params, Inputs: t.Inputs})
	if err != nil {
		panic(fmt.Sprintf("job: encode task: %v", err)) // params were checked by the manifest
	}
	return b
}

// Cost returns the planner's declared cost of task t in cost units: the
// policy's task_cost times the numeric parameter cost_param when set. It
// depends only on the job, never on what a peer reports or how long the
// task took. It is what the job offers to pay; a receipt credits the
// work the task took up to it (WorkCost).
func (j *Job) Cost(t Task) float64 {
	p := j.Manifest.Policy
	c := p.TaskCost
	if p.CostParam != "" {
		switch v := t.Params[p.CostParam].(type) {
		case int64:
			c *= float64(v)
		case float64:
			c *= v
		}
	}
	return c
}

// mustHaveTask panics on a task index out of range [0, NumTasks), a
// programming error.
func (j *Job) mustHaveTask(index int64) {
	if index < 0 || index >= j.numTasks {
		panic(fmt.Sprintf("job: task index %d out of range [0,%d)", index, j.numTasks))
	}
}

// CostOf is Cost(Task(index)): the planner's declared cost of task index
// in cost units. Where the policy names no cost_param (the cost is its
// task_cost alone) it builds no task, whose seed alone is a SHA-256: a
// scheduler asks for a task's cost at each lease and each decision. It
// panics on an index out of range, as Task does.
func (j *Job) CostOf(index int64) float64 {
	if j.Manifest.Policy.CostParam != "" {
		return j.Cost(j.Task(index))
	}
	j.mustHaveTask(index)
	return j.Manifest.Policy.TaskCost
}

// WorkCostOf is WorkCost(Task(index), instructions), building no task
// where CostOf builds none.
func (j *Job) WorkCostOf(index int64, instructions uint64) float64 {
	return workCost(j.CostOf(index), instructions)
}

// InstructionsPerCostUnit is the published rate at which counted work
// becomes cost: one cost unit for every 10^8 WebAssembly instructions a
// task executed, as the worker counts them (its metering rule 1; GPU
// threads count one each). At this rate the examples' tasks, which
// declare the default task_cost of 1, count 0.04 to 34 units of work
// (docs/benchmarks.md).
const InstructionsPerCostUnit = 1e8

// WorkCost returns the cost of task t in cost units when the work it took
// counted instructions: instructions / InstructionsPerCostUnit, capped by
// what the job declared a task would cost (Cost): credit is what the
// work took, never more than the job's owner offered. It depends only on
// the job and the count, which replicas agree on; never on time.
func (j *Job) WorkCost(t Task, instructions uint64) float64 {
	return workCost(j.Cost(t), instructions)
}

// workCost is WorkCost's rule: the declared cost, capped by the counted
// instructions at InstructionsPerCostUnit.
func workCost(declared float64, instructions uint64) float64 {
	return min(declared, float64(instructions)/InstructionsPerCostUnit)
}

// FoldAssignment returns, for a kfold job, each data row's fold.
func (j *Job) FoldAssignment() ([]int, error) {
	s := j.Manifest.Split
	if s.Rule != "kfold" {
		return nil, fmt.Errorf("job: split rule is %q, not kfold", s.Rule)
	}
	return fold.Assign(j.rows, s.K, s.Shuffle, Seed64(Seed(j.ID)))
}

func hashFile(m *Manifest, field, path string) (InputRef, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return InputRef{}, m.fail(field, "file %s does not exist", path)
		}
		return InputRef{}, m.fail(field, "%v", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return InputRef{}, m.fail(field, "read %s: %v", path, err)
	}
	ref := InputRef{Path: path, Size: n}
	h.Sum(ref.SHA256[:0])
	return ref, nil
}

func checkWasm(m *Manifest, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return m.fail("program", "%v", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > MaxProgramBytes {
		return m.fail("program", "%s is %d MiB, larger than the %d MiB a worker loads", path, fi.Size()>>20, MaxProgramBytes>>20)
	}
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, []byte("\x00asm")) {
		return m.fail("program", "%s is not a WebAssembly module (build it with GOOS=wasip1 GOARCH=wasm go build)", path)
	}
	return nil
}
