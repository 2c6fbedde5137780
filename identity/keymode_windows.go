//go:build windows

package identity

import "io/fs"

// exposed is false on Windows: Go reports every writable file there as
// mode 0666, since access is decided by the file's ACL, not mode bits.
// Key files live in the user's profile (%APPDATA%), whose inherited ACL
// grants only the user, SYSTEM and administrators.
func exposed(fs.FileMode) bool { return false }
