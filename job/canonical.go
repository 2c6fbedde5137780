package job

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"time"

	"github.com/fxamacker/cbor/v2"
)

var canonicalDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DefaultMapType:   reflect.TypeOf(map[string]any(nil)),
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
		MaxNestedLevels:  32,
		MaxArrayElements: 1 << 20,
		MaxMapPairs:      1 << 16,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// FromCanonical rebuilds a planned job from its canonical encoding (as in
// Job.Canonical) and the files it names: blob returns the local path of the
// file with a given digest. It is how a peer or a coordinator that received
// a job by ID and its bytes by digest gets the same tasks as the owner.
// The rebuilt job must hash to sha256(canonical), and every file must match
// its digest; otherwise it returns an error wrapping ErrManifest.
func FromCanonical(canonical []byte, blob func(Digest) string) (*Job, error) {
	return fromCanonical(canonical, blob, false)
}

// FromCanonicalStored is FromCanonical for files kept by digest in a
// store that checked each file's SHA-256 when it stored it (a
// coordinator's blob directory): it takes the path blob(d) returns as
// holding d's bytes instead of reading and hashing the file again, so
// rebuilding many jobs after a restart reads no program or input it does
// not need for planning (a kfold or chunks split input is still read).
// The rebuilt job must still hash to sha256(canonical).
func FromCanonicalStored(canonical []byte, blob func(Digest) string) (*Job, error) {
	return fromCanonical(canonical, blob, true)
}

func fromCanonical(canonical []byte, blobPath func(Digest) string, stored bool) (*Job, error) {
	vouched := map[string]Digest{}
	blob := func(d Digest) string {
		p := blobPath(d)
		if stored {
			vouched[filepath.Clean(p)] = d
		}
		return p
	}
	bad := func(format string, args ...any) error {
		return &ManifestError{File: "canonical job", Msg: fmt.Sprintf(format, args...)}
	}
	var doc map[string]any
	if err := canonicalDecMode.Unmarshal(canonical, &doc); err != nil {
		return nil, bad("not a canonical job encoding: %v", err)
	}
	doc = normaliseCBOR(doc).(map[string]any)
	if v, _ := doc["idlepool"].(int64); v != 1 {
		return nil, bad("unsupported encoding version %v", doc["idlepool"])
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	m := &Manifest{Path: "canonical job", Name: str(doc, "name"), Description: str(doc, "description"), Link: str(doc, "link"), Inputs: map[string]string{}}
	prog, err := ParseDigest(str(doc, "program"))
	if err != nil {
		return nil, bad("program: %v", err)
	}
	m.Program = blob(prog)
	inputs, _ := doc["inputs"].(map[string]any)
	for name, v := range inputs {
		d, err := ParseDigest(fmt.Sprint(v))
		if err != nil {
			return nil, bad("inputs.%s: %v", name, err)
		}
		m.Inputs[name] = blob(d)
	}
	split, _ := doc["split"].(map[string]any)
	if split == nil {
		return nil, bad("no split")
	}
	m.Split.Rule = str(split, "rule")
	m.Split.Tasks, _ = split["tasks"].(int64)
	k, _ := split["k"].(int64)
	m.Split.K = int(k)
	m.Split.Input = str(split, "input")
	m.Split.Shuffle, _ = split["shuffle"].(bool)
	m.Split.ChunkBytes, _ = split["chunk_bytes"].(int64)
	m.Split.Header, _ = split["header"].(bool)
	if m.Split.Format = str(split, "format"); m.Split.Format == "" && (m.Split.Rule == "kfold" || m.Split.Rule == "chunks") {
		// Not the manifest's default, which looks at the input's file
		// name: a blob has none.
		m.Split.Format = m.Split.baseFormat()
	}
	m.Split.Params, _ = split["params"].(map[string]any)
	m.Split.Grid, _ = split["grid"].(map[string]any)
	merges, _ := doc["merge"].([]any)
	for i, v := range merges {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, bad("merge[%d]: %v", i, err)
		}
		var ms MergeSpec
		if err := json.Unmarshal(b, &ms); err != nil {
			return nil, bad("merge[%d]: %v", i, err)
		}
		m.Merge = append(m.Merge, ms)
	}
	if d, ok := doc["derive"].(map[string]any); ok {
		m.Derive = map[string]string{}
		for name, v := range d {
			m.Derive[name] = fmt.Sprint(v)
		}
	}
	pol, _ := doc["policy"].(map[string]any)
	num := func(k string) int64 { v, _ := pol[k].(int64); return v }
	m.Policy = Policy{
		Redundancy:   int(num("redundancy")),
		Quorum:       int(num("quorum")),
		LeaseTimeout: Duration{time.Duration(num("lease_timeout_ms")) * time.Millisecond},
		MemoryMiB:    int(num("memory_mib")),
		TimeLimit:    Duration{time.Duration(num("time_limit_ms")) * time.Millisecond},
		StdoutMiB:    int(num("stdout_mib")),
		Participants: str(pol, "participants"),
		CostParam:    str(pol, "cost_param"),
	}
	switch c := pol["task_cost"].(type) {
	case float64:
		m.Policy.TaskCost = c
	case int64:
		m.Policy.TaskCost = float64(c)
	}
	if req, ok := doc["requirements"].(map[string]any); ok {
		switch g := req["gpu"].(type) {
		case bool:
			if g {
				m.Requirements.GPU = GPURequired
			}
		case string:
			if err := m.Requirements.GPU.UnmarshalText([]byte(g)); err != nil {
				return nil, bad("requirements.gpu: %v", err)
			}
		}
		m.Requirements.GPUMemoryMiB, _ = req["gpu_memory_mib"].(int64)
		m.Requirements.GPUComputeCapability = str(req, "gpu_compute_capability")
		m.Requirements.MemoryMiB, _ = req["memory_mib"].(int64)
		m.Requirements.Prefer = str(req, "prefer")
	}
	if m.Verify, err = verifyFromCanonical(doc); err != nil {
		return nil, bad("%v", err)
	}
	if err := m.normalise(nil); err != nil {
		return nil, err
	}
	if !stored {
		vouched = nil
	}
	j, err := planStored(m, vouched)
	if err != nil {
		return nil, err
	}
	if want := sha256.Sum256(canonical); j.ID != want {
		return nil, bad("the rebuilt job has ID %s, not %s: the encoding is not canonical or a file does not match its digest", j.ID, Digest(want))
	}
	for name, ref := range j.Inputs {
		if d, _ := ParseDigest(fmt.Sprint(inputs[name])); d != ref.SHA256 {
			return nil, bad("input %s does not match its digest", name)
		}
	}
	return j, nil
}

// normaliseCBOR maps decoded CBOR values onto the types a TOML manifest
// yields: unsigned integers become int64 (when they fit), nested maps
// map[string]any.
func normaliseCBOR(v any) any {
	switch x := v.(type) {
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return x
	case map[string]any:
		for k, e := range x {
			x[k] = normaliseCBOR(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normaliseCBOR(e)
		}
		return x
	default:
		return v
	}
}
