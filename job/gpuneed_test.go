package job_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"idlepool/job"
)

func TestRequirementsGPU(t *testing.T) {
	for _, tc := range []struct {
		name, table string
		want        job.GPUNeed
		field, says string // a bad table's error
	}{
		{name: "absent", table: "", want: job.GPUNone},
		{name: "false", table: "gpu = false\n", want: job.GPUNone},
		{name: "true", table: "gpu = true\n", want: job.GPURequired},
		{name: "optional", table: "gpu = \"optional\"\n", want: job.GPUOptional},
		{name: "optional with bounds", table: "gpu = \"optional\"\ngpu_memory_mib = 4096\ngpu_compute_capability = \"6.0\"\n", want: job.GPUOptional},
		{name: "a typo", table: "gpu = \"optinal\"\n", field: "requirements.gpu", says: `"optional"`},
		{name: "a number", table: "gpu = 1\n", field: "requirements.gpu", says: `"optional"`},
		{name: "bounds without a GPU", table: "gpu_memory_mib = 4096\n", field: "requirements.gpu", says: `gpu = "optional"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := job.ParseManifest("v.toml", t.TempDir(), []byte(tolBase+"[requirements]\n"+tc.table))
			if tc.field != "" {
				var me *job.ManifestError
				if !errors.As(err, &me) || me.Field != tc.field || !strings.Contains(me.Msg, tc.says) {
					t.Fatalf("error %v, want one naming %s that says %q", err, tc.field, tc.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Requirements.GPU != tc.want {
				t.Errorf("gpu = %v, want %v", m.Requirements.GPU, tc.want)
			}
		})
	}
}

func TestGPUNeedJSON(t *testing.T) {
	for _, tc := range []struct {
		r    job.Requirements
		json string
	}{
		{job.Requirements{}, `{}`},
		{job.Requirements{GPU: job.GPURequired}, `{"gpu":true}`},
		{job.Requirements{GPU: job.GPUOptional, GPUMemoryMiB: 1024}, `{"gpu":"optional","gpu_memory_mib":1024}`},
	} {
		b, err := json.Marshal(tc.r)
		if err != nil || string(b) != tc.json {
			t.Errorf("Marshal(%+v) = %s, %v, want %s", tc.r, b, err, tc.json)
		}
		var back job.Requirements
		if err := json.Unmarshal(b, &back); err != nil || back != tc.r {
			t.Errorf("Unmarshal(%s) = %+v, %v", b, back, err)
		}
	}
	var r job.Requirements
	if err := json.Unmarshal([]byte(`{"gpu":"sometimes"}`), &r); err == nil {
		t.Error(`gpu "sometimes" accepted`)
	}
}
