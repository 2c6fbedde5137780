package offers

import (
	"testing"

	"idlepool/job"
)

func TestListingProcessor(t *testing.T) {
	for _, tc := range []struct {
		r    job.Requirements
		want string
	}{
		{job.Requirements{}, "CPU"},
		{job.Requirements{GPU: job.GPURequired}, "GPU"},
		{job.Requirements{GPU: job.GPUOptional}, "CPU or GPU"},
		{job.Requirements{GPU: job.GPURequired, GPUMemoryMiB: 8192, GPUComputeCapability: "8.0"}, "GPU 8 GiB cc 8.0+"},
	} {
		if got := (Listing{Requirements: tc.r}).Processor(); got != tc.want {
			t.Errorf("Processor of %+v = %q, want %q", tc.r, got, tc.want)
		}
	}
}
