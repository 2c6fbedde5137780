// Package version is the version of this build of idlepool, set by the
// build (make build, make tray, make release: -ldflags "-X
// idlepool/version.Version=X.Y.Z"), and the comparison of versions that
// the self-update and a pool's version policy use.
//
// A version is three dot-separated decimal numbers, MAJOR.MINOR.PATCH
// (semantic versioning without pre-release or build parts); "1.4" is
// read as "1.4.0". A build without ldflags says Dev, which is older than
// any release: a developer's build never refuses an update and is never
// offered as one.
package version

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Dev is the version of a build that was not given one.
const Dev = "dev"

// Version is this build's version: "X.Y.Z", or Dev. The build sets it with
// -ldflags "-X idlepool/version.Version=X.Y.Z" (the Makefile reads it
// from FyneApp.toml).
var Version = Dev

// ErrBadVersion is wrapped by Parse's errors.
var ErrBadVersion = errors.New("version: not MAJOR.MINOR.PATCH")

// V is a parsed version. The zero V is Dev (older than every release).
type V struct{ Major, Minor, Patch int }

// Parse reads "X.Y.Z" or "X.Y" (patch 0), each a decimal number of at
// most 9 digits, with an optional leading "v"; Dev gives the zero V.
// Anything else is an error wrapping ErrBadVersion that names s.
func Parse(s string) (V, error) {
	if s == Dev {
		return V{}, nil
	}
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return V{}, fmt.Errorf("%w: %q", ErrBadVersion, s)
	}
	var n [3]int
	for i, p := range parts {
		if p == "" || len(p) > 9 || strings.TrimLeft(p, "0123456789") != "" {
			return V{}, fmt.Errorf("%w: %q", ErrBadVersion, s)
		}
		n[i], _ = strconv.Atoi(p)
	}
	return V{n[0], n[1], n[2]}, nil
}

// Current is Version parsed; a Version that does not parse (a build given
// a malformed one) counts as Dev.
func Current() V {
	v, err := Parse(Version)
	if err != nil {
		return V{}
	}
	return v
}

// IsDev reports whether v is the zero V (a build without a version).
func (v V) IsDev() bool { return v == V{} }

// Compare returns -1, 0 or +1 as v is older than, the same as or newer
// than w.
func (v V) Compare(w V) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		if d < 0 {
			return -1
		}
		if d > 0 {
			return 1
		}
	}
	return 0
}

// Less reports whether v is older than w.
func (v V) Less(w V) bool { return v.Compare(w) < 0 }

// String is "X.Y.Z", or Dev for the zero V.
func (v V) String() string {
	if v.IsDev() {
		return Dev
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// Short is v without a zero patch ("1.4" for 1.4.0), as people write a
// minimum version ("this pool needs idlepool 1.4 or newer").
func (v V) Short() string {
	if v.Patch == 0 && !v.IsDev() {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return v.String()
}
