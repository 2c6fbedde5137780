//go:build linux

package idle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tklauser/go-sysconf"
)

// procLoad is the Linux LoadSource. It reads /proc/stat for the machine's
// CPU times and /proc/[pid]/stat for the own processes and their
// descendants (found through the kernel's children files, or else by
// reading every process and matching parent PIDs) and sums their
// utime+stime+cutime+cstime. Counting cutime and cstime (the time of children that exited and
// were waited for) keeps Own continuous when a worker subprocess exits
// between two readings: its time moves from its own entry to its parent's.
// Descendants that were re-parented away from idlepool (daemonised) are not
// counted as own.
type procLoad struct {
	root string // "/proc"; a testdata directory in tests
}

var _ LoadSource = procLoad{}

// CPUCounters implements LoadSource.
func (l procLoad) CPUCounters(ctx context.Context, own []int) (CPUCounters, error) {
	hz := int64(100)
	if v, err := sysconf.Sysconf(sysconf.SC_CLK_TCK); err == nil && v > 0 {
		hz = v
	}
	ticks := func(t uint64) time.Duration { return time.Duration(t) * time.Second / time.Duration(hz) }

	stat, err := os.ReadFile(filepath.Join(l.root, "stat"))
	if err != nil {
		return CPUCounters{}, fmt.Errorf("cpu load: %w", err)
	}
	total, idle, err := parseProcStat(stat)
	if err != nil {
		return CPUCounters{}, fmt.Errorf("cpu load: %w", err)
	}
	tree, ok := l.ownTree(own)
	if !ok { // no children files (a kernel without CONFIG_PROC_CHILDREN)
		if tree, err = l.processes(ctx); err != nil {
			return CPUCounters{}, fmt.Errorf("cpu load: %w", err)
		}
	}
	return CPUCounters{
		Total: ticks(total),
		Busy:  ticks(total - idle),
		Own:   ticks(ownTicks(tree, own)),
	}, nil
}

// ownTree reads the own processes and their descendants only, following
// /proc/[pid]/task/[tid]/children (proc(5), Linux 3.5 with
// CONFIG_PROC_CHILDREN) instead of reading every process's stat: at rest
// the sampler then reads a handful of small files, not hundreds. ok is
// false when the kernel has no children files; a process that exits
// meanwhile is left out.
func (l procLoad) ownTree(own []int) (procs map[int]procTimes, ok bool) {
	procs = map[int]procTimes{}
	queue := append([]int(nil), own...)
	checked := false
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if _, seen := procs[pid]; seen || pid <= 0 {
			continue
		}
		dir := filepath.Join(l.root, strconv.Itoa(pid))
		b, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue // exited, or not ours to read
		}
		pt, err := parsePIDStat(b)
		if err != nil {
			continue
		}
		procs[pid] = pt
		tasks, err := os.ReadDir(filepath.Join(dir, "task"))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			kids, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "children"))
			if err != nil {
				if !checked && errors.Is(err, os.ErrNotExist) {
					return nil, false
				}
				continue
			}
			checked = true
			for _, f := range bytes.Fields(kids) {
				if kid, err := strconv.Atoi(string(f)); err == nil {
					// The child's stat names its parent, as ownTicks
					// expects; its own entry comes when it is read.
					queue = append(queue, kid)
				}
			}
		}
	}
	return procs, true
}

// procTimes is what the load source needs of /proc/[pid]/stat.
type procTimes struct {
	ppid  int
	ticks uint64 // utime + stime + cutime + cstime
}

func (l procLoad) processes(ctx context.Context) (map[int]procTimes, error) {
	entries, err := os.ReadDir(l.root)
	if err != nil {
		return nil, err
	}
	procs := make(map[int]procTimes, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(l.root, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		if pt, err := parsePIDStat(b); err == nil {
			procs[pid] = pt
		}
	}
	return procs, nil
}

// ownTicks sums the ticks of the processes in own and their descendants.
func ownTicks(procs map[int]procTimes, own []int) uint64 {
	children := make(map[int][]int, len(procs))
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	seen := map[int]bool{}
	queue := append([]int(nil), own...)
	var sum uint64
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] || pid <= 0 {
			continue
		}
		seen[pid] = true
		if p, ok := procs[pid]; ok {
			sum += p.ticks
			queue = append(queue, children[pid]...)
		}
	}
	return sum
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat (proc(5)):
// user nice system idle iowait irq softirq steal guest guest_nice, in clock
// ticks. guest and guest_nice are already inside user and nice. It returns
// the total of the first eight and idle+iowait.
func parseProcStat(b []byte) (total, idle uint64, err error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, 0, fmt.Errorf("parse /proc/stat: no cpu line")
	}
	for i := 1; i < len(f) && i <= 8; i++ {
		v, err := strconv.ParseUint(string(f[i]), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		total += v
		if i == 4 || i == 5 {
			idle += v
		}
	}
	return total, idle, nil
}

// parsePIDStat reads ppid, utime, stime, cutime and cstime (fields 4 and
// 14–17 of proc(5)) from /proc/[pid]/stat. The command name in field 2 may
// hold spaces and parentheses, so fields are counted from its last ')'.
func parsePIDStat(b []byte) (procTimes, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("parse pid stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("parse pid stat: %d fields", len(f))
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procTimes{}, fmt.Errorf("parse pid stat: %w", err)
	}
	var pt procTimes
	pt.ppid = ppid
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(string(s), 10, 64) // cutime and cstime are signed in proc(5)
		if err != nil {
			return procTimes{}, fmt.Errorf("parse pid stat: %w", err)
		}
		if v > 0 {
			pt.ticks += uint64(v)
		}
	}
	return pt, nil
}
