package app

import (
	"strings"
	"testing"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/offers"
)

// TestJobDetailsGPU: the Browse window says whether a job needs a GPU or
// only uses one where the donor allows it, and says nothing of GPUs for a
// CPU job.
func TestJobDetailsGPU(t *testing.T) {
	for _, tc := range []struct {
		gpu        job.GPUNeed
		want, lack string
	}{
		{job.GPURequired, "GPU: needs a GPU", "uses a GPU"},
		{job.GPUOptional, "GPU: uses a GPU if you allow one", "needs a GPU"},
		{job.GPUNone, "A task needs: CPU", "GPU:"},
	} {
		r := browseRow{job: agent.BoardJob{Listing: offers.Listing{Name: "mc", Owner: "idx", Pool: "alpha", MemoryMiB: 256,
			Requirements: job.Requirements{GPU: tc.gpu}}, Why: []string{}}, poolName: "alpha", poolURL: "http://a"}
		got := jobDetails(r)
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.lack) {
			t.Errorf("gpu = %v: details want %q and not %q:\n%s", tc.gpu, tc.want, tc.lack, got)
		}
	}
}
