package energy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcRoot is where Linux exposes processes' CPU times.
const ProcRoot = "/proc"

// userHZ is the unit of the CPU times in /proc: the kernel reports them
// in USER_HZ ticks, 100 a second on every Linux architecture Go builds
// for (proc(5), sysconf(_SC_CLK_TCK)).
const userHZ = 100

func ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// CPUTimes reads CPU times: what every process of the machine spent
// (Busy: all CPUs' time but idle, summed over CPUs) and what one
// process spent (Process: user and system). A process that is gone is
// an error. Linux reads /proc (procTimes); Windows GetSystemTimes and
// GetProcessTimes (SystemCPUTimes). Called from one goroutine at a time.
type CPUTimes interface {
	Busy() (time.Duration, error)
	Process(pid int) (time.Duration, error)
}

// procTimes reads CPU times from a proc tree (ProcRoot, or a fake one).
type procTimes string

// Busy is busyCPU.
func (p procTimes) Busy() (time.Duration, error) { return busyCPU(string(p)) }

// Process is processCPU.
func (p procTimes) Process(pid int) (time.Duration, error) { return processCPU(string(p), pid) }

// busyCPU returns the CPU time all processes of the machine have spent
// (user, nice, system, irq, softirq, steal: all but idle and iowait),
// summed over CPUs, from the first line of root/stat.
func busyCPU(root string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return 0, fmt.Errorf("read CPU times: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("read CPU times: %s/stat does not start with a cpu line", root)
	}
	var busy uint64
	for i, s := range f[1:] {
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read CPU times: field %d of %s/stat: %w", i+1, root, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += v
	}
	return ticks(busy), nil
}

// processCPU returns the CPU time (user and system) process pid has
// spent, from root/PID/stat (fields 14 and 15, after the command name in
// parentheses, which may itself hold spaces and parentheses).
func processCPU(root string, pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("read CPU time of process %d: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("read CPU time of process %d: %d fields", pid, len(f)+2)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("read CPU time of process %d: bad utime or stime", pid)
	}
	return ticks(u + s), nil
}
