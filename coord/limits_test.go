package coord_test

import (
	"testing"

	"idlepool/coord"
	"idlepool/job"
)

// The coordinator accepts the largest result a manifest may allow
// (policy.stdout_mib at its ceiling), so no such job fails in a pool for a
// limit the manifest check let through.
func TestResultLimitCoversManifestCeiling(t *testing.T) {
	if coord.MaxResultBytes < job.MaxStdoutMiB<<20 {
		t.Errorf("coord.MaxResultBytes = %d, less than job.MaxStdoutMiB (%d MiB)", coord.MaxResultBytes, job.MaxStdoutMiB)
	}
}
