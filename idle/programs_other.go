//go:build !linux

package idle

import (
	"context"
	"fmt"

	"github.com/shirou/gopsutil/v4/process"
)

// processList is a ProcessSource over gopsutil's process list: each
// process's short name and its executable's base name where readable.
type processList struct{}

var _ ProcessSource = processList{}

// ProgramNames implements ProcessSource.
func (processList) ProgramNames(ctx context.Context) ([]string, error) {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	names := make([]string, 0, len(procs))
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list processes: %w", err)
		}
		if n, err := p.NameWithContext(ctx); err == nil && n != "" {
			names = append(names, n)
		}
		if exe, err := p.ExeWithContext(ctx); err == nil && exe != "" {
			names = append(names, exe)
		}
	}
	return names, nil
}
