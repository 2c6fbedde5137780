//go:build !unix

package coord

import "errors"

// fileLimit is unsupported where there is no RLIMIT_NOFILE; Config.Validate
// then assumes 1024 open files.
func fileLimit() (int64, error) { return 0, errors.ErrUnsupported }
