//go:build windows || darwin

package idle

import (
	"context"
	"fmt"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/process"
)

// psLoad is the LoadSource of Windows and macOS, over gopsutil: the
// machine's CPU times (GetSystemTimes on Windows, host_processor_info on
// macOS) and the user+system time of the own processes and their live
// descendants (found by parent PID). Unlike Linux these platforms keep no
// time of exited children, so a worker that exits between two readings
// loses the time it used since the first one from Own, and OtherCPUShare
// over that window is too high by as much.
type psLoad struct{}

var _ LoadSource = psLoad{}

// CPUCounters implements LoadSource.
func (psLoad) CPUCounters(ctx context.Context, own []int) (CPUCounters, error) {
	ts, err := cpu.TimesWithContext(ctx, false)
	if err != nil || len(ts) == 0 {
		return CPUCounters{}, fmt.Errorf("cpu load: cpu times: %v", err)
	}
	t := ts[0]
	total := t.User + t.System + t.Idle + t.Nice + t.Iowait + t.Irq + t.Softirq + t.Steal
	busy := total - t.Idle - t.Iowait

	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return CPUCounters{}, fmt.Errorf("cpu load: list processes: %w", err)
	}
	children := map[int][]*process.Process{}
	byPID := map[int]*process.Process{}
	for _, p := range procs {
		byPID[int(p.Pid)] = p
		if pp, err := p.PpidWithContext(ctx); err == nil {
			children[int(pp)] = append(children[int(pp)], p)
		}
	}
	seen := map[int]bool{}
	queue := append([]int(nil), own...)
	var ownSec float64
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		p, ok := byPID[pid]
		if seen[pid] || !ok {
			continue
		}
		seen[pid] = true
		if pt, err := p.TimesWithContext(ctx); err == nil {
			ownSec += pt.User + pt.System
		}
		for _, c := range children[pid] {
			queue = append(queue, int(c.Pid))
		}
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return CPUCounters{Total: sec(total), Busy: sec(busy), Own: sec(ownSec)}, nil
}
