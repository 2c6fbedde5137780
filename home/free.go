package home

import "fmt"

// FreeBytes returns the bytes that this user may still write on the file
// system that holds dir (statfs's available blocks times their size on
// Unix, GetDiskFreeSpaceEx on Windows). Elsewhere it returns an error
// wrapping errors.ErrUnsupported.
func FreeBytes(dir string) (uint64, error) {
	n, err := freeBytes(dir)
	if err != nil {
		return 0, fmt.Errorf("free space on %s: %w", dir, err)
	}
	return n, nil
}
