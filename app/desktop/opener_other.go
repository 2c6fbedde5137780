//go:build !unix && !windows

package desktop

import "errors"

// opener: no desktop opener is known here.
func opener(string) (string, []string, error) { return "", nil, errors.ErrUnsupported }
