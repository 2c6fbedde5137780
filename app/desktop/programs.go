package desktop

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/shirou/gopsutil/v4/process"
)

// kthreadd is the pid of Linux's kernel thread daemon, the parent of
// every other kernel thread.
const kthreadd = 2

// ownPrograms are this program's names, left out of the picker: waiting
// for one of them would pause computing for as long as the app runs.
var ownPrograms = []string{"idlepool", "idlepool-tray"}

// runningProcess is what the picker needs to know of a process.
type runningProcess struct {
	PID, PPID int32
	Name      string // the short name; "" when unreadable
	Exe       string // the executable's path; "" when unreadable
	NoExe     bool   // the process has no executable (a kernel thread)
}

// programNames lists the names of the programs running now, sorted and
// without duplicates (executables by their base names), for the settings
// window's program picker. Kernel threads and this program's own names
// are left out.
func programNames(ctx context.Context) ([]string, error) {
	procs, err := runningProcesses(ctx)
	if err != nil {
		return nil, err
	}
	own := slices.Clone(ownPrograms)
	if self, err := os.Executable(); err == nil {
		own = append(own, filepath.Base(self))
	}
	return pickable(procs, own, runtime.GOOS == "linux"), nil
}

// runningProcesses lists the processes this user may see. Those that end
// while being read, or whose details cannot be read, keep what could be.
func runningProcesses(ctx context.Context) ([]runningProcess, error) {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]runningProcess, 0, len(procs))
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list processes: %w", err)
		}
		rp := runningProcess{PID: p.Pid}
		rp.PPID, _ = p.PpidWithContext(ctx)
		rp.Name, _ = p.NameWithContext(ctx)
		exe, err := p.ExeWithContext(ctx)
		rp.Exe = exe
		// A kernel thread's /proc/PID/exe links nowhere; another user's
		// process only denies reading it.
		rp.NoExe = errors.Is(err, fs.ErrNotExist)
		out = append(out, rp)
	}
	return out, nil
}

// pickable returns the base names of procs' short names and executables,
// sorted and once each, leaving out kernel threads (on linux: kthreadd,
// its children, and processes without an executable) and the names in
// own (compared by programKey).
func pickable(procs []runningProcess, own []string, linux bool) []string {
	skip := map[string]bool{}
	for _, o := range own {
		skip[programKey(o)] = true
	}
	var names []string
	for _, p := range procs {
		if linux && (p.PID == kthreadd || p.PPID == kthreadd || p.NoExe) {
			continue
		}
		for _, n := range []string{p.Name, p.Exe} {
			n = baseName(strings.TrimSpace(n))
			if n != "" && !skip[programKey(n)] {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// baseName is the part of a path after its last '/' or '\'.
func baseName(path string) string {
	return path[strings.LastIndexAny(path, `/\`)+1:]
}

// programKey is how program names compare, as the idle package matches
// them: the base name, lower case, without a trailing ".exe".
func programKey(name string) string {
	return strings.TrimSuffix(strings.ToLower(baseName(strings.TrimSpace(name))), ".exe")
}
