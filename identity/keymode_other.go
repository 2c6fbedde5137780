//go:build !windows

package identity

import "io/fs"

// exposed reports whether a key file with this mode may be read by
// others: any group or other permission bit.
func exposed(mode fs.FileMode) bool { return mode.Perm()&0o077 != 0 }
