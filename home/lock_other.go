//go:build !unix && !windows

package home

import (
	"errors"
	"os"
)

// tryLock: this system has no file locks idlepool uses.
func tryLock(*os.File) error { return errors.ErrUnsupported }
