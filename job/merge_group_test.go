package job

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGroupKeysManifest checks both forms of group_by in a manifest, and
// that one path written either way is the job that group_by = "T" always
// was.
func TestGroupKeysManifest(t *testing.T) {
	const head = "name = \"g\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"grid\"\n[split.grid]\nT = [1, 2]\n[[merge]]\nrule = \"stats\"\nfield = \"e\"\n"
	single := plan(t, head+"group_by = \"T\"\n", goldenFiles)
	listed := plan(t, head+"group_by = [\"T\"]\n", goldenFiles)
	if single.ID != listed.ID {
		t.Errorf("group_by = [\"T\"] has ID %s, group_by = \"T\" %s: want the same job", listed.ID, single.ID)
	}
	if diff := cmp.Diff(GroupKeys{"T"}, listed.Manifest.Merge[0].GroupBy); diff != "" {
		t.Errorf("GroupBy (-want +got):\n%s", diff)
	}
	two := plan(t, head+"group_by = [\"T\", \"rep\"]\n", goldenFiles)
	if diff := cmp.Diff(GroupKeys{"T", "rep"}, two.Manifest.Merge[0].GroupBy); diff != "" {
		t.Errorf("GroupBy (-want +got):\n%s", diff)
	}
	swapped := plan(t, head+"group_by = [\"rep\", \"T\"]\n", goldenFiles)
	for _, j := range []*Job{two, swapped} {
		if j.ID == single.ID {
			t.Errorf("group_by %s has the ID of group_by = \"T\"", j.Manifest.Merge[0].GroupBy)
		}
	}
	if two.ID == swapped.ID {
		t.Error("group_by = [\"T\", \"rep\"] and [\"rep\", \"T\"] have one ID; their results nest differently")
	}
	back, err := FromCanonical(two.Canonical, func(Digest) string { return two.Program.Path })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(two.Manifest.Merge[0].GroupBy, back.Manifest.Merge[0].GroupBy); diff != "" {
		t.Errorf("rebuilt GroupBy (-want +got):\n%s", diff)
	}
}

func TestGroupKeysErrors(t *testing.T) {
	const head = "name = \"g\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 1\n[[merge]]\nrule = \"stats\"\nfield = \"e\"\n"
	tests := []struct{ groupBy, field, want string }{
		{`3`, "merge[0].group_by", "want a string or a list of strings, got an integer"},
		{`true`, "merge[0].group_by", "want a string or a list of strings, got a boolean"},
		{`{ a = "b" }`, "merge.group_by", "want a string or a list of strings, got a TOML inline table"},
		{`[1, 2]`, "merge.group_by", "want a string"},
		{`["a", "b", "a"]`, "merge[0]", `group_by: "a" is listed twice`},
		{`["a", ""]`, "merge[0]", "group_by: an empty path"},
		{`["a", "b.*"]`, "merge[0]", `group_by cannot contain "*"`},
		{`["a", "b..c"]`, "merge[0]", "group_by:"},
		{`["a", "b", "c", "d", "e", "f", "g", "h", "i"]`, "merge[0]", "group_by lists 9 paths, at most 8"},
	}
	for _, tc := range tests {
		t.Run(tc.groupBy, func(t *testing.T) {
			_, err := ParseManifest("job.toml", t.TempDir(), []byte(head+"group_by = "+tc.groupBy+"\n"))
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error = %v, want a *ManifestError", err)
			}
			if me.Field != tc.field || !strings.Contains(me.Msg, tc.want) {
				t.Errorf("error = %v (field %q), want field %q and a message containing %q", err, me.Field, tc.field, tc.want)
			}
		})
	}
	// [derive] cannot name values per group, and says which group_by.
	_, err := ParseManifest("job.toml", t.TempDir(), []byte(head+"group_by = [\"a\", \"b\"]\n[derive]\nx = \"e.mean\"\n"))
	if err == nil || !strings.Contains(err.Error(), `merge "e" has group_by = ["a", "b"], so it has one value per group`) {
		t.Errorf("derive of a grouped entry: error %v", err)
	}
}

func TestGroupKeysJSON(t *testing.T) {
	for _, tc := range []struct {
		keys GroupKeys
		json string
	}{{GroupKeys{"T"}, `"T"`}, {GroupKeys{"a", "b"}, `["a","b"]`}, {nil, `null`}} {
		b, err := json.Marshal(tc.keys)
		if err != nil || string(b) != tc.json {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.keys, b, err, tc.json)
		}
		var back GroupKeys
		if err := json.Unmarshal(b, &back); err != nil || !cmp.Equal(back, tc.keys) {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, back, err, tc.keys)
		}
	}
	// A spec without group_by encodes as it always did: no member.
	b, err := json.Marshal(MergeSpec{Rule: "sum", Field: "x"})
	if err != nil || strings.Contains(string(b), "group_by") {
		t.Errorf("Marshal = %s, %v; want no group_by", b, err)
	}
}

// TestGroupKeysScalarsAndState checks the names of grouped scalars and
// that a state with two paths survives MarshalBinary, while one whose
// group is not two values, or not in its one encoding, is refused.
func TestGroupKeysScalarsAndState(t *testing.T) {
	spec := MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"a", "b"}}
	m := mergerFor(t, spec)
	addResults(t, m, `{"a":0.1,"b":2,"e":3}`, `{"a":0.1,"b":2,"e":4}`, `{"a":"x","b":true,"e":1}`)
	want := map[string]float64{"e[0.1][2]": 7, "e[0.1][2].sum": 7, "e[0.1][2].count": 2, "e[x][true]": 1, "e[x][true].sum": 1, "e[x][true].count": 1}
	if diff := cmp.Diff(want, m.Scalars()); diff != "" {
		t.Errorf("Scalars (-want +got):\n%s", diff)
	}
	state, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back := mergerFor(t, spec)
	if err := back.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	if a, b := resultText(t, m), resultText(t, back); a != b {
		t.Errorf("restored result %s, want %s", b, a)
	}
	// The first group, "x" and "true", as written: 0x01 'x' 0x04 "true".
	good := "\x01x\x04true"
	if !strings.Contains(string(state), good) {
		t.Fatalf("state %q does not hold the group %q", state, good)
	}
	for name, bad := range map[string]string{
		"four values":           "\x01x\x01t\x01u\x00",
		"a length past the end": "\x01x\x05true",
	} {
		if len(bad) != len(good) {
			t.Fatalf("%s: %q is not as long as %q", name, bad, good)
		}
		broken := strings.Replace(string(state), good, bad, 1)
		err := mergerFor(t, spec).UnmarshalBinary([]byte(broken))
		if !errors.Is(err, ErrBadMergeState) {
			t.Errorf("%s: UnmarshalBinary = %v, want ErrBadMergeState", name, err)
		}
	}
}

func TestGroupKeyEncoding(t *testing.T) {
	for _, texts := range [][]string{{"x", "true"}, {"", ""}, {"a\x01b", "c"}, {strings.Repeat("v", 300), "w", "z"}} {
		key := joinGroupKey(texts)
		got, ok := splitGroupKey(key, len(texts))
		if !ok || !cmp.Equal(got, texts) || !validGroupKey(key, len(texts)) {
			t.Errorf("joinGroupKey(%q) = %q, which splits into %q, %v", texts, key, got, ok)
		}
		if validGroupKey(key, len(texts)+1) {
			t.Errorf("%q is valid as %d values", key, len(texts)+1)
		}
	}
	for _, bad := range []string{"\x81\x00x\x03tru", "\x01", "\x05abc", ""} {
		if validGroupKey(bad, 2) {
			t.Errorf("validGroupKey(%q, 2) = true", bad)
		}
	}
}
