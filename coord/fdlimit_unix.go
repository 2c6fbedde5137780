//go:build unix

package coord

import "syscall"

// fileLimit returns how many files this process may have open (the soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit at start).
func fileLimit() (int64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur > 1<<30 {
		return 1 << 30, nil
	}
	return int64(l.Cur), nil
}
