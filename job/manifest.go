package job

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// Manifest is the job description a person writes, as TOML. Paths in it are
// relative to the manifest file's directory; Load resolves them to absolute
// paths. docs/author.md ("The manifest") describes the format.
type Manifest struct {
	// Name is a short name for people; Description says what the job does.
	Name        string `toml:"name"`
	Description string `toml:"description"`
	// Link is an https URL where people read more about the job (its
	// project's page), or "" (see CheckLink).
	Link string `toml:"link"`
	// Program is the path of the WebAssembly (WASI preview 1) module.
	Program string `toml:"program"`
	// Inputs maps an input's name (letters, digits, '_', '-', '.') to its
	// file path.
	Inputs map[string]string `toml:"inputs"`
	// Split is the rule that cuts the job into tasks.
	Split SplitSpec `toml:"split"`
	// Merge lists the accumulators that task results fold into.
	Merge []MergeSpec `toml:"merge"`
	// Derive maps a name to an expression over merged scalars, evaluated
	// once at the end (see ParseExpr).
	Derive map[string]string `toml:"derive"`
	// Policy holds redundancy, limits and participation.
	Policy Policy `toml:"policy"`
	// Requirements says what a task needs from a machine, for matching
	// jobs with capacity offers.
	Requirements Requirements `toml:"requirements"`
	// Verify asks for adaptive replication and spot checks (see Verify).
	Verify Verify `toml:"verify"`

	// Dir is the absolute directory of the manifest file (not from TOML).
	Dir string `toml:"-"`
	// Path is the manifest file's path as given to Load (not from TOML).
	Path string `toml:"-"`
}

// SplitSpec is the [split] table: a rule and its options. Which options
// apply depends on Rule:
//
//   - "range": Tasks tasks that share Params (Monte Carlo).
//   - "grid": one task per point of the Cartesian product of Grid's axes,
//     the last axis (in sorted name order) varying fastest (sweeps). An
//     axis is a list of values or a range table (start, stop, and step or
//     num, and spacing; see gridRange), which checking replaces by its
//     canonical table; the job's encoding holds that table, and Plan
//     expands it into values the same way on every machine.
//   - "replicas": Tasks tasks that differ only in their seed (ensembles).
//   - "kfold": K tasks over the CSV input Input; task f tests on the rows
//     in fold f (package job/fold), optionally Shuffle'd by a permutation
//     derived from the job seed.
//   - "chunks": the file input Input cut into chunks of whole rows of at
//     most ChunkBytes bytes, one task per chunk; a row longer than
//     ChunkBytes gets a chunk of its own, and one longer than the policy's
//     MemoryMiB too is refused. With Header the first row is kept out of
//     the chunks and given to every task.
//
// Format says what a row of a kfold or chunks input is: FormatCSV (RFC
// 4180 records; the default for kfold and for an input whose file name
// ends in ".csv") or FormatLines (physical lines; the default for other
// chunks inputs). The file must be valid in that format, or Plan refuses
// it, naming the line.
type SplitSpec struct {
	Rule       string         `toml:"rule"`
	Tasks      int64          `toml:"tasks"`
	K          int            `toml:"k"`
	Input      string         `toml:"input"`
	Shuffle    bool           `toml:"shuffle"`
	ChunkBytes int64          `toml:"chunk_bytes"`
	Header     bool           `toml:"header"`
	Format     string         `toml:"format"`
	Params     map[string]any `toml:"params"`
	Grid       map[string]any `toml:"grid"`
}

// Policy is the [policy] table. Redundancy and Quorum apply to pools;
// MemoryMiB and TimeLimit bound every task everywhere; Participants says who
// may compute ("open", "invite" or "owner"; enforced by pools). TaskCost and
// CostParam are the planner's cost model: a task costs TaskCost units (default
// 1), multiplied by the value of the numeric task parameter CostParam when
// set (e.g. "samples"). Cost never depends on what a peer reports or on time.
type Policy struct {
	Redundancy   int      `toml:"redundancy"`
	Quorum       int      `toml:"quorum"`
	LeaseTimeout Duration `toml:"lease_timeout"`
	MemoryMiB    int      `toml:"memory_mib"`
	TimeLimit    Duration `toml:"time_limit"`
	Participants string   `toml:"participants"`
	TaskCost     float64  `toml:"task_cost"`
	CostParam    string   `toml:"cost_param"`

	// StdoutMiB bounds every task everywhere too: what it may write on
	// stdout, its result, in MiB, 1..MaxStdoutMiB, default
	// DefaultStdoutMiB. Writing more fails the task (worker failure kind
	// output-too-large).
	StdoutMiB int `toml:"stdout_mib"`
}

// Requirements is the [requirements] table: what a machine must offer to
// be leased this job's tasks, and which machines the job prefers among
// those that qualify. The zero value asks only for what the policy's
// memory_mib implies.
type Requirements struct {
	// GPU says whether a task needs a GPU (gpu = true), can use one
	// (gpu = "optional") or neither; GPUMemoryMiB and
	// GPUComputeCapability ("8.0") bound which GPUs count.
	GPU                  GPUNeed `toml:"gpu" json:"gpu,omitzero"`
	GPUMemoryMiB         int64   `toml:"gpu_memory_mib" json:"gpu_memory_mib,omitempty"`
	GPUComputeCapability string  `toml:"gpu_compute_capability" json:"gpu_compute_capability,omitempty"`
	// MemoryMiB is the machine memory a task needs; 0 means the policy's
	// memory_mib.
	MemoryMiB int64 `toml:"memory_mib" json:"memory_mib,omitempty"`
	// Prefer ranks qualifying machines: "memory", "cores" or "gpu_memory"
	// (more first); "" ranks none.
	Prefer string `toml:"prefer" json:"prefer,omitempty"`
}

// IsZero reports whether r asks for nothing beyond the defaults.
func (r Requirements) IsZero() bool { return r == Requirements{} }

func (r *Requirements) normalise(m *Manifest) error {
	var errs ManifestErrors
	add := func(err error) { errs.add(m.Path, err) }
	if r.GPUMemoryMiB < 0 || r.MemoryMiB < 0 {
		add(m.fail("requirements", "memory must not be negative"))
	}
	if (r.GPUMemoryMiB > 0 || r.GPUComputeCapability != "") && !r.GPU.Uses() {
		add(m.fail("requirements.gpu", "gpu_memory_mib and gpu_compute_capability need gpu = true or gpu = \"optional\""))
	}
	if c := r.GPUComputeCapability; c != "" {
		var major, minor int
		if n, err := fmt.Sscanf(c, "%d.%d", &major, &minor); n != 2 || err != nil || fmt.Sprintf("%d.%d", major, minor) != c {
			add(m.fail("requirements.gpu_compute_capability", "want MAJOR.MINOR such as \"8.0\", got %q", c))
		}
	}
	switch r.Prefer {
	case "", "memory", "cores", "gpu_memory":
	default:
		add(m.fail("requirements.prefer", "want \"memory\", \"cores\" or \"gpu_memory\", got %q", r.Prefer))
	}
	return errs.err()
}

// Duration is a time.Duration written in TOML as a string such as "90s" or
// "5m" (time.ParseDuration syntax).
type Duration struct{ time.Duration }

// UnmarshalText parses a time.ParseDuration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration such as \"90s\" or \"5m\": %w", err)
	}
	d.Duration = v
	return nil
}

// Defaults of the policy, used where the manifest leaves a field out.
const (
	DefaultRedundancy   = 2
	DefaultQuorum       = 2
	DefaultLeaseTimeout = 5 * time.Minute
	DefaultMemoryMiB    = 256
	DefaultTimeLimit    = 10 * time.Minute
	DefaultParticipants = "open"
	// MaxMemoryMiB is the most linear memory a WebAssembly module can
	// address (4 GiB, 65536 pages of 64 KiB).
	MaxMemoryMiB = 4096
	// DefaultStdoutMiB is a task's stdout (result) limit when the policy
	// sets no stdout_mib; it equals the worker's default.
	DefaultStdoutMiB = 16
	// MaxStdoutMiB is the largest stdout_mib: what every worker captures
	// (worker.MaxStdoutLimitBytes) and every pool accepts as one result
	// (pool.DefaultMaxResultBytes), so no donor refuses it.
	MaxStdoutMiB = 64
	// MaxProgramBytes is the largest program a worker loads
	// (worker.MaxModuleBytes); Plan refuses a larger one.
	MaxProgramBytes = 256 << 20
)

// ManifestError is a problem in a manifest, for people: the file, where in
// it (a line, or a field path) and what is expected.
type ManifestError struct {
	File   string // manifest path
	Line   int    // 1-based line, 0 when unknown
	Column int    // 1-based column on Line, 0 when unknown
	Field  string // dotted field path such as "split.rule", "" when unknown
	Msg    string // what is wrong and what is expected
	// Err, when set, is a sentinel saying more about the kind of problem
	// (ErrInputData); errors.Is sees it.
	Err error
}

func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrManifest) true for every ManifestError.
func (e *ManifestError) Is(target error) bool { return target == ErrManifest }

// Unwrap returns Err.
func (e *ManifestError) Unwrap() error { return e.Err }

// LoadManifest reads, parses and validates the manifest at path, resolving
// relative paths against its directory and filling in policy defaults. The
// files it names are not read here (see Plan). Errors are *ManifestError
// (errors.Is(err, ErrManifest)) or an os error wrapped with the path.
func LoadManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return ParseManifest(path, filepath.Dir(abs), data)
}

// ParseManifest parses manifest text; name labels errors and dir is the
// directory that relative paths are resolved against. It validates the
// result like LoadManifest, and reports every problem it finds at once:
// a *ManifestError for one, ManifestErrors for several. A file that is no
// manifest at all (a WebAssembly program, an archive, binary data) is one
// problem wrapping ErrNotManifest.
func ParseManifest(name, dir string, data []byte) (*Manifest, error) {
	if err := notManifest(name, data); err != nil {
		return nil, err
	}
	m, errs, text := decodeManifest(name, data)
	if m == nil {
		return nil, errs.err()
	}
	m.Dir, m.Path = dir, name
	errs = append(errs, checkGroupByTypes(name, data, m.Merge, text)...)
	var checks ManifestErrors
	checks.add(name, m.normalise(text))
	for _, e := range checks {
		// A problem of a field whose text has one already (a merge
		// entry without its misspelt rule) follows from that one.
		if !text.doubt(e.Field) {
			text.keys.place(e, e.Field)
			errs = append(errs, e)
		}
	}
	// Those with a line in file order, then the others as checked.
	unplaced := func(e *ManifestError) int {
		if e.Line == 0 {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(errs, func(a, b *ManifestError) int {
		return cmp.Or(cmp.Compare(unplaced(a), unplaced(b)), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if err := errs.err(); err != nil {
		return nil, err
	}
	return m, nil
}

// tomlError explains one error of go-toml's decoder: a syntax error or a
// value of the wrong type, with its line and column where go-toml gives
// them, or the field where it does not.
func tomlError(file string, data []byte, err error) *ManifestError {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return &ManifestError{File: file, Line: row, Column: col, Field: strings.Join(de.Key(), "."), Msg: PlainTypeError(de.Error())}
	}
	// go-toml hands a number, boolean or date to Duration.UnmarshalText and
	// returns its error without a position: find the field here.
	var raw struct {
		Policy       map[string]any `toml:"policy"`
		Requirements map[string]any `toml:"requirements"`
		Verify       map[string]any `toml:"verify"`
	}
	if toml.Unmarshal(data, &raw) == nil {
		if v, ok := raw.Requirements["gpu"]; ok {
			var g GPUNeed
			if _, isBool := v.(bool); !isBool && g.UnmarshalText([]byte(fmt.Sprint(v))) != nil {
				return &ManifestError{File: file, Field: "requirements.gpu", Msg: g.UnmarshalText([]byte(fmt.Sprint(v))).Error()}
			}
		}
		for _, d := range []struct {
			table map[string]any
			field string
		}{{raw.Policy, "policy.lease_timeout"}, {raw.Policy, "policy.time_limit"}, {raw.Verify, "verify.check_window"}} {
			if v, ok := d.table[strings.TrimPrefix(d.field, fieldSection(d.field)+".")]; ok {
				if _, isString := v.(string); !isString {
					return &ManifestError{File: file, Field: d.field,
						Msg: fmt.Sprintf("want a duration string such as \"90s\" or \"5m\", got %v", v)}
				}
			}
		}
	}
	return &ManifestError{File: file, Msg: err.Error()}
}

// checkGroupByTypes refuses a group_by that is neither a string nor a list
// (group_by = 3): the TOML decoder hands any plain value to
// GroupKeys.UnmarshalText as text. Each such group_by is a problem of the
// text, added to text's doubts.
func checkGroupByTypes(file string, data []byte, merges []MergeSpec, text *manifestText) ManifestErrors {
	if !slices.ContainsFunc(merges, func(s MergeSpec) bool { return len(s.GroupBy) > 0 }) {
		return nil
	}
	var raw struct {
		Merge []map[string]any `toml:"merge"`
	}
	if err := toml.Unmarshal(data, &raw); err != nil {
		return ManifestErrors{{File: file, Msg: err.Error()}}
	}
	var errs ManifestErrors
	for i, e := range raw.Merge {
		switch v := e["group_by"].(type) {
		case nil, string, []any: // a list's elements were decoded as strings
		default:
			key := fmt.Sprintf("merge[%d].group_by", i)
			me := &ManifestError{File: file, Field: key, Msg: fmt.Sprintf("want a string or a list of strings, got %s", tomlKind(v))}
			if k, ok := text.keys.find(key); ok && k.valueLine > 0 {
				me.Line, me.Column = k.valueLine, k.valueCol
			}
			errs = append(errs, me)
			text.doubts = append(text.doubts, textDoubt{key: key})
		}
	}
	return errs
}

var typeErrorRE = regexp.MustCompile(`cannot decode TOML (\w+(?: \w+)?) into (?:struct field \S+|a Go value) of type (\S+)`)

// PlainTypeError rewrites the TOML library's type mismatch, which names Go
// types ("cannot decode TOML string into struct field job.SplitSpec.Tasks
// of type int64"), in the file's terms ("want an integer, got a TOML
// string"); another message of the library comes back without its
// "toml: " prefix. It serves every TOML file idlepool reads (manifests,
// training files).
func PlainTypeError(msg string) string {
	m := typeErrorRE.FindStringSubmatch(msg)
	if m == nil {
		return strings.TrimPrefix(msg, "toml: ")
	}
	want := map[string]string{
		"int": "an integer", "int64": "an integer", "float64": "a number", "string": "a string",
		"bool": "true or false", "[]string": "a list of strings", "[]float64": "a list of numbers",
		"map[string]string": "a table of strings", "map[string]interface": "a table", "map[string]any": "a table",
		"[]job.MergeSpec": "[[merge]] entries", "job.SplitSpec": "a [split] table", "job.Policy": "a [policy] table",
		"job.GroupKeys": "a string or a list of strings",
	}[m[2]]
	if want == "" {
		want = "another kind of value"
	}
	return fmt.Sprintf("want %s, got a TOML %s", want, m[1])
}

func (m *Manifest) fail(field, format string, args ...any) error {
	return &ManifestError{File: m.Path, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (m *Manifest) resolve(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(m.Dir, p)
}

// normalise checks every field, resolves paths and fills defaults. It
// reports every problem it finds at once (a *ManifestError or
// ManifestErrors), one for each field at most, leaving out the checks
// that need a field with a problem: a derived value that names a merge
// entry with a problem, [verify] min_quorum when the policy's quorum has
// one. text, when not nil, is the manifest's text: where its keys are,
// and which of them have problems already (see decodeManifest).
func (m *Manifest) normalise(text *manifestText) error {
	var errs ManifestErrors
	add := func(err error) bool {
		errs.add(m.Path, err)
		return err == nil
	}
	if strings.TrimSpace(m.Name) == "" {
		add(m.fail("name", "missing: give the job a short name, e.g. name = \"pi\""))
	}
	if err := CheckLink(m.Link); err != nil {
		add(m.fail("link", "%v", err))
	}
	if m.Program == "" {
		add(m.fail("program", "missing: the path of the .wasm program, e.g. program = \"pi.wasm\""))
	} else {
		m.Program = m.resolve(m.Program)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Inputs)) {
		switch p := m.Inputs[name]; {
		case !validName(name):
			add(m.fail("inputs."+name, "input names may use letters, digits, '_', '-' and '.' only, and not start with '.'"))
		case name == "chunk" || name == "chunks":
			add(m.fail("inputs."+name, "the name %q is reserved for chunks of a split input", name))
		case p == "":
			add(m.fail("inputs."+name, "empty path"))
		default:
			m.Inputs[name] = m.resolve(p)
		}
	}
	add(m.checkSplit())
	if len(m.Merge) == 0 {
		add(m.fail("merge", "missing: at least one [[merge]] entry saying how task results combine"))
	}
	// entryOK[i]: merge entry i has no problem, in its text or its fields.
	entryOK := make([]bool, len(m.Merge))
	seen := map[string]bool{}
	for i := range m.Merge {
		s := &m.Merge[i]
		if s.Name == "" {
			s.Name = s.Field
		}
		if s.Name == "" {
			s.Name = s.Rule
		}
		field := fmt.Sprintf("merge[%d]", i)
		entryOK[i] = !text.doubt(field)
		if seen[s.Name] {
			add(m.fail(field, "two merge entries are named %q; give one a distinct name = \"...\"", s.Name))
			entryOK[i] = false
			continue
		}
		seen[s.Name] = true
		if err := s.Validate(); err != nil {
			e := m.fail(field, "%v", err).(*ManifestError)
			if se, ok := errors.AsType[*mergeSpecError](err); ok && se.key != "" && text != nil {
				text.keys.place(e, field+"."+se.key)
			}
			add(e)
			entryOK[i] = false
		}
	}
	if !slices.Contains(entryOK, false) {
		add(m.checkCollectTask())
	}
	for _, name := range slices.Sorted(maps.Keys(m.Derive)) {
		add(m.checkDerive(name, func(ref string) bool {
			named := false
			for i, ms := range m.Merge {
				if ref == ms.Name || strings.HasPrefix(ref, ms.Name+".") {
					named = true
					if !entryOK[i] {
						return false
					}
				}
			}
			return len(m.Merge) > 0 && (named || !text.mayName(ref, len(m.Merge)))
		}))
	}
	add(m.Requirements.normalise(m))
	add(m.Policy.normalise(m))
	p := m.Policy
	quorumOK := p.Redundancy >= 1 && p.Quorum >= 1 && p.Quorum <= p.Redundancy &&
		!text.doubt("policy.quorum") && !text.doubt("policy.redundancy")
	var verify ManifestErrors
	verify.add(m.Path, m.Verify.normalise(m))
	for _, e := range verify {
		if quorumOK || e.Field != "verify.min_quorum" {
			errs = append(errs, e)
		}
	}
	return errs.err()
}

// checkDerive checks the [derive] expression name: it must parse and name
// only scalars the merge entries give. Only the names that check says to
// are checked: a name of a merge entry with a problem may be right.
func (m *Manifest) checkDerive(name string, check func(ref string) bool) error {
	e, err := ParseExpr(m.Derive[name])
	if err != nil {
		return m.fail("derive."+name, "%v", err)
	}
	for _, ref := range e.Names() {
		if !check(ref) {
			continue
		}
		if err := m.checkScalarName(ref); err != nil {
			return m.fail("derive."+name, "%v", err)
		}
	}
	return nil
}

func (p *Policy) normalise(m *Manifest) error {
	if p.Redundancy == 0 {
		p.Redundancy = DefaultRedundancy
	}
	if p.Quorum == 0 {
		p.Quorum = min(DefaultQuorum, p.Redundancy)
	}
	if p.LeaseTimeout.Duration == 0 {
		p.LeaseTimeout.Duration = DefaultLeaseTimeout
	}
	if p.MemoryMiB == 0 {
		p.MemoryMiB = DefaultMemoryMiB
	}
	if p.TimeLimit.Duration == 0 {
		p.TimeLimit.Duration = DefaultTimeLimit
	}
	if p.StdoutMiB == 0 {
		p.StdoutMiB = DefaultStdoutMiB
	}
	if p.Participants == "" {
		p.Participants = DefaultParticipants
	}
	if p.TaskCost == 0 {
		p.TaskCost = 1
	}
	var errs ManifestErrors
	add := func(err error) { errs.add(m.Path, err) }
	switch {
	case p.Redundancy < 1:
		add(m.fail("policy.redundancy", "want at least 1, got %d", p.Redundancy))
	case p.Quorum < 1 || p.Quorum > p.Redundancy:
		add(m.fail("policy.quorum", "want 1..redundancy (%d), got %d", p.Redundancy, p.Quorum))
	}
	// The job ID holds durations in whole milliseconds (see canonical).
	switch {
	case p.LeaseTimeout.Duration < time.Second:
		add(m.fail("policy.lease_timeout", "want at least 1s, got %s", p.LeaseTimeout.Duration))
	case p.LeaseTimeout.Duration%time.Millisecond != 0:
		add(m.fail("policy.lease_timeout", "want whole milliseconds, got %s", p.LeaseTimeout.Duration))
	}
	if p.MemoryMiB < 1 || p.MemoryMiB > MaxMemoryMiB {
		add(m.fail("policy.memory_mib", "want 1..%d MiB, got %d", MaxMemoryMiB, p.MemoryMiB))
	}
	if p.StdoutMiB < 1 || p.StdoutMiB > MaxStdoutMiB {
		add(m.fail("policy.stdout_mib", "want 1..%d MiB, got %d: a task's result may be at most %d MiB, the most a worker captures and a pool accepts",
			MaxStdoutMiB, p.StdoutMiB, MaxStdoutMiB))
	}
	switch {
	case p.TimeLimit.Duration < 100*time.Millisecond:
		add(m.fail("policy.time_limit", "want at least 100ms, got %s", p.TimeLimit.Duration))
	case p.TimeLimit.Duration%time.Millisecond != 0:
		add(m.fail("policy.time_limit", "want whole milliseconds, got %s", p.TimeLimit.Duration))
	}
	if !(p.TaskCost > 0 && p.TaskCost <= 1e15) {
		add(m.fail("policy.task_cost", "want a positive number of cost units, got %v", p.TaskCost))
	}
	if p.CostParam != "" {
		add(m.checkCostParam(p.CostParam))
	}
	switch p.Participants {
	case "open", "invite", "owner":
	default:
		add(m.fail("policy.participants", "want \"open\", \"invite\" or \"owner\", got %q", p.Participants))
	}
	return errs.err()
}

// checkCollectTask refuses a whole-result collect when another entry
// reads a member "task" from every result: collect adds "task" (the task
// index) to each row, so every row would clash.
func (m *Manifest) checkCollectTask() error {
	for i, c := range m.Merge {
		if c.Rule != RuleCollect || c.Field != "" || len(c.Fields) > 0 {
			continue
		}
		for _, o := range m.Merge {
			for _, p := range slices.Concat([]string{o.Field, o.Key}, o.GroupBy, o.Fields) {
				if mp, err := parseMergePath(p); err == nil && len(mp.segs) > 0 && mp.segs[0] == "task" {
					return m.fail(fmt.Sprintf("merge[%d]", i), "collect of the whole result adds a \"task\" column (the task index) to each row, "+
						"and merge %q reads %q from every result, so every row would clash: list the columns in fields = [...], or rename the program's \"task\"",
						o.Name, p)
				}
			}
		}
	}
	return nil
}

// checkScalarName reports whether a derive name can be evaluated against
// the merge entries: it must be a scalar that an entry's rule gives (see
// Merger.Scalars), such as "inside" or "inside.count" for a sum and
// "energy.mean" for stats. Values per group (group_by) have names that an
// expression cannot write, and are refused; for a field with "*" the key
// is known only once results arrive, and a name that passes here and is
// still missing then is reported with the result.
func (m *Manifest) checkScalarName(ref string) error {
	var entry *MergeSpec
	for i := range m.Merge {
		ms := &m.Merge[i]
		if ref != ms.Name && !strings.HasPrefix(ref, ms.Name+".") {
			continue
		}
		entry = ms
		if len(ms.GroupBy) == 0 && ms.scalarName(strings.TrimPrefix(ref, ms.Name)) {
			return nil
		}
	}
	if entry == nil {
		first := m.Merge[0]
		return fmt.Errorf("%q names no merged value: names start with a [[merge]] entry's name (%s), e.g. %s",
			ref, strings.Join(m.mergeNames(), ", "), strings.Join(quoteAll(first.scalarExamples()), " or "))
	}
	if len(entry.GroupBy) > 0 {
		return fmt.Errorf("%q cannot be evaluated: merge %q has group_by = %s, so it has one value per group, which [derive] cannot name; the merged result shows each group",
			ref, entry.Name, entry.GroupBy)
	}
	return fmt.Errorf("%q cannot be evaluated: merge %q (rule %s) gives %s", ref, entry.Name, entry.Rule,
		strings.Join(quoteAll(entry.scalarExamples()), ", "))
}

// scalarName reports whether rest, what follows the entry's name in a
// derive name ("" or ".mean"), is a scalar of the entry's rule.
func (s MergeSpec) scalarName(rest string) bool {
	if strings.Contains(s.Field, "*") {
		return len(rest) > 1 // "." and a key (and maybe more): known with the results
	}
	d := s.withDefaults()
	index := func(prefix string, n int) bool { // ".counts.I" with 0 <= I < n (n < 0: any)
		i, err := strconv.Atoi(strings.TrimPrefix(rest, prefix))
		return strings.HasPrefix(rest, prefix) && err == nil && i >= 0 && (n < 0 || i < n) &&
			strings.TrimPrefix(rest, prefix) == strconv.Itoa(i)
	}
	switch s.Rule {
	case RuleSum:
		return rest == "" || rest == ".sum" || rest == ".count"
	case RuleStats:
		return slices.Contains([]string{".count", ".sum", ".mean", ".variance", ".sample_variance", ".stddev", ".sample_stddev", ".min", ".max"}, rest)
	case RuleHistogram:
		return rest == ".count" || rest == ".underflow" || rest == ".overflow" || index(".counts.", d.Bins)
	case RuleQuantiles:
		if rest == ".count" || rest == ".min" || rest == ".max" {
			return true
		}
		for _, q := range d.Quantiles {
			if rest == "."+quantileName(q) {
				return true
			}
		}
		return false
	case RuleTopK:
		rank, what, ok := strings.Cut(strings.TrimPrefix(rest, "."), ".")
		i, err := strconv.Atoi(rank)
		return ok && err == nil && strconv.Itoa(i) == rank && i >= 0 && i < d.K && (what == "task" || what == "key" || what == "value")
	case RuleArgmin, RuleArgmax:
		return rest == ".task" || rest == ".key" || rest == ".value"
	case RuleVectorMean:
		return rest == ".count" || index(".mean.", -1)
	case RuleVectorSum:
		return rest == ".count" || index(".sum.", -1)
	case RuleCollect, RuleConcat:
		return rest == ".rows" || rest == ".skipped" || rest == ".refused"
	}
	return false
}

// scalarExamples returns derive names of the entry's scalars, for
// messages: all of them for most rules, the first few of a list.
func (s MergeSpec) scalarExamples() []string {
	n := s.Name
	if strings.Contains(s.Field, "*") {
		n += ".KEY" // a key of the object at the "*"
	}
	d := s.withDefaults()
	switch s.Rule {
	case RuleSum:
		return []string{n, n + ".count"}
	case RuleStats:
		return []string{n + ".mean", n + ".stddev", n + ".sample_stddev", n + ".variance", n + ".count", n + ".sum", n + ".min", n + ".max"}
	case RuleHistogram:
		return []string{n + ".count", n + ".counts.0", n + ".counts." + strconv.Itoa(d.Bins-1), n + ".underflow", n + ".overflow"}
	case RuleQuantiles:
		out := []string{n + ".count", n + ".min", n + ".max"}
		for _, q := range d.Quantiles {
			out = append(out, n+"."+quantileName(q))
		}
		return out
	case RuleTopK:
		return []string{n + ".0.key", n + ".0.value", n + ".0.task", n + "." + strconv.Itoa(d.K-1) + ".key"}
	case RuleArgmin, RuleArgmax:
		return []string{n + ".key", n + ".value", n + ".task"}
	case RuleVectorMean:
		return []string{n + ".count", n + ".mean.0"}
	case RuleVectorSum:
		return []string{n + ".count", n + ".sum.0"}
	default:
		return []string{n + ".rows", n + ".skipped"}
	}
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}

func (m *Manifest) mergeNames() []string {
	names := make([]string, len(m.Merge))
	for i, ms := range m.Merge {
		names[i] = ms.Name
	}
	return names
}

// checkCostParam makes sure the cost parameter is a non-negative number for
// every task: a constant of split.params or a grid axis of numbers.
func (m *Manifest) checkCostParam(name string) error {
	isNum := func(v any) bool {
		switch x := v.(type) {
		case int64:
			return x >= 0
		case float64:
			return x >= 0
		}
		return false
	}
	if v, ok := m.Split.Params[name]; ok {
		if !isNum(v) {
			return m.fail("policy.cost_param", "split.params.%s must be a non-negative number to serve as the cost", name)
		}
		return nil
	}
	if axis, ok := m.Split.Grid[name]; ok {
		if lo, _, numeric := gridAxisBounds(axis); !numeric || lo < 0 {
			return m.fail("policy.cost_param", "split.grid.%s must hold non-negative numbers to serve as the cost", name)
		}
		return nil
	}
	return m.fail("policy.cost_param", "no parameter %q in split.params or split.grid", name)
}

func validName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 128 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

// MaxTasks bounds how many tasks one job may have.
const MaxTasks = 1 << 32

// checkSplit checks the [split] table: every problem of its rule's
// fields, and of each grid axis.
func (m *Manifest) checkSplit() error {
	s := &m.Split
	var errs ManifestErrors
	add := func(err error) bool {
		errs.add(m.Path, err)
		return err == nil
	}
	if err := checkParams("split.params", s.Params); err != nil {
		add(m.fail("split.params", "%v", err))
	}
	// The rule sets these in every task's params; a constant of the same
	// name would be silently overwritten.
	ruleParams := map[string][]string{
		"kfold":  {"k", "fold", "rows", "shuffle", "permutation_seed", "permutation_seed_hex"},
		"chunks": {"chunk_index", "offset", "length", "sha256", "header"},
	}
	for _, name := range ruleParams[s.Rule] {
		if _, clash := s.Params[name]; clash {
			add(m.fail("split.params."+name, "the %s rule sets %q in every task's params; choose another name", s.Rule, name))
		}
	}
	needTasks := func() error {
		if s.Tasks < 1 || s.Tasks > MaxTasks {
			return m.fail("split.tasks", "want 1..%d tasks, got %d", int64(MaxTasks), s.Tasks)
		}
		return nil
	}
	needInput := func() error {
		if s.Input == "" {
			return m.fail("split.input", "missing: the name of the [inputs] entry to split")
		}
		if _, ok := m.Inputs[s.Input]; !ok {
			return m.fail("split.input", "no input named %q in [inputs]", s.Input)
		}
		return nil
	}
	if s.Format != "" && s.Rule != "kfold" && s.Rule != "chunks" {
		add(m.fail("split.format", "applies only to the kfold and chunks rules, which read rows of a file"))
	}
	switch s.Rule {
	case "range", "replicas":
		add(needTasks())
	case "grid":
		if len(s.Grid) == 0 {
			add(m.fail("split.grid", "missing: a grid needs at least one axis, e.g. T = [1.5, 2.0]"))
			break
		}
		total, counted := int64(1), true
		for _, name := range slices.Sorted(maps.Keys(s.Grid)) {
			if _, clash := s.Params[name]; clash {
				counted = add(m.fail("split.grid."+name, "also set in split.params; a name is either constant or an axis")) && counted
				continue
			}
			n, err := s.checkGridAxis(name)
			if err != nil {
				counted = add(m.fail("split.grid."+name, "%v", err)) && counted
				continue
			}
			if n > 0 && total > MaxTasks/n {
				total = MaxTasks + 1
			} else {
				total *= n
			}
		}
		if counted && total > MaxTasks {
			add(m.fail("split.grid", "the grid has more than %d points", int64(MaxTasks)))
		}
	case "kfold":
		if s.K < 2 || s.K > 1000 {
			add(m.fail("split.k", "want 2..1000 folds, got %d", s.K))
		}
		add(needInput())
		add(m.checkFormat())
	case "chunks":
		if s.ChunkBytes < 1 {
			add(m.fail("split.chunk_bytes", "want a positive chunk size in bytes, got %d", s.ChunkBytes))
		}
		add(needInput())
		add(m.checkFormat())
	case "":
		add(m.fail("split.rule", "missing: one of range, grid, replicas, kfold, chunks"))
	default:
		add(m.fail("split.rule", "unknown rule %q: want one of range, grid, replicas, kfold, chunks", s.Rule))
	}
	return errs.err()
}

// checkFormat checks split.format of a kfold or chunks split, or fills in
// its default: csv for kfold and for an input whose file name ends in
// ".csv", lines otherwise.
func (m *Manifest) checkFormat() error {
	s := &m.Split
	switch s.Format {
	case FormatCSV, FormatLines:
		return nil
	case "":
		s.Format = s.baseFormat()
		if strings.EqualFold(filepath.Ext(m.Inputs[s.Input]), ".csv") {
			s.Format = FormatCSV
		}
		return nil
	}
	return m.fail("split.format", "want \"csv\" (RFC 4180 records) or \"lines\" (plain text, one row per line), got %q", s.Format)
}

func checkParams(where string, params map[string]any) error {
	for k, v := range params {
		if err := checkValue(v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// checkValue accepts the TOML values that have one canonical JSON and CBOR
// form: strings, integers, finite floats, booleans, and arrays and tables
// of those. Dates and times are refused: they have no single encoding.
func checkValue(v any) error {
	switch x := v.(type) {
	case string, bool, int64:
		return nil
	case float64:
		if x != x || x > maxFinite || x < -maxFinite {
			return errors.New("want a finite number")
		}
		return nil
	case []any:
		for _, e := range x {
			if err := checkValue(e); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for _, e := range x {
			if err := checkValue(e); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("unsupported value %v of type %T: use strings, numbers, booleans, arrays or tables", v, v)
	}
}

const maxFinite = 1.7976931348623157e308
