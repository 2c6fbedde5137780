package job_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
)

func TestVerifyTable(t *testing.T) {
	base := "name = \"v\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 3\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"
	for _, tc := range []struct {
		name, table string
		want        job.Verify
		adaptive    bool
		field       string // the field a bad table's error names
	}{
		{name: "absent", table: ""},
		{name: "adaptive with defaults", table: "[verify]\nmin_quorum = 1\n", adaptive: true,
			want: job.Verify{MinQuorum: 1, SpotCheck: job.DefaultSpotCheck, TrustAfter: job.DefaultTrustAfter, CheckWindow: job.Duration{Duration: job.DefaultCheckWindow}}},
		{name: "always replicate", table: "[verify]\nmin_quorum = 2\nspot_check = 0.5\n",
			want: job.Verify{MinQuorum: 2, SpotCheck: 0.5, TrustAfter: job.DefaultTrustAfter, CheckWindow: job.Duration{Duration: job.DefaultCheckWindow}}},
		{name: "all set", table: "[verify]\nmin_quorum = 1\nspot_check = 0.2\ntrust_after = 5\ncheck_window = \"10m\"\n", adaptive: true,
			want: job.Verify{MinQuorum: 1, SpotCheck: 0.2, TrustAfter: 5, CheckWindow: job.Duration{Duration: 10 * time.Minute}}},
		{name: "min_quorum above quorum", table: "[verify]\nmin_quorum = 3\n", field: "verify.min_quorum"},
		{name: "spot_check above 1", table: "[verify]\nmin_quorum = 1\nspot_check = 1.5\n", field: "verify.spot_check"},
		{name: "negative trust_after", table: "[verify]\nmin_quorum = 1\ntrust_after = -1\n", field: "verify.trust_after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := job.ParseManifest("v.toml", t.TempDir(), []byte(base+tc.table))
			if tc.field != "" {
				var me *job.ManifestError
				if !errors.As(err, &me) || me.Field != tc.field {
					t.Fatalf("error %v, want one naming %s", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, m.Verify); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			if m.Adaptive() != tc.adaptive {
				t.Errorf("Adaptive() = %v, want %v", m.Adaptive(), tc.adaptive)
			}
		})
	}
}
