//go:build !unix && !windows

package home

import "errors"

func freeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }
