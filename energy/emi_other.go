//go:build !windows

package energy

import (
	"errors"
	"fmt"
)

// OpenSystemEMI is Windows' (its Energy Meter counters): elsewhere it
// returns errors.ErrUnsupported.
func OpenSystemEMI() (*EMI, error) {
	return nil, fmt.Errorf("energy: the Energy Meter counters are Windows': %w", errors.ErrUnsupported)
}

// SystemCPUTimes is Windows' CPU times: nil elsewhere (Linux reads
// Config.Proc).
func SystemCPUTimes() CPUTimes { return nil }
