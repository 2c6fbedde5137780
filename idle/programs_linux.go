//go:build linux

package idle

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procYoung is how long after a process is first listed a procScan reads
// its names again at every sample: launchers exec the game they start, and
// Wine renames its process to the Windows program (PR_SET_NAME) only once
// it runs, so what a process is called settles in its first seconds.
const procYoung = 30 * time.Second

// procRecheck is how many processes older than procYoung a procScan reads
// again at each sample, in turn, so that a late rename or exec, or a PID
// reused between two samples, is seen within ceil(processes/procRecheck)
// samples while a sample at rest reads a fixed number of files.
const procRecheck = 4

// processList is Linux's ProcessSource: the machine's /proc, read by one
// procScan that every Sampler of this process shares, so that what it
// learnt outlives a Sampler rebuilt after a settings change.
type processList struct{}

var _ ProcessSource = processList{}

// machineProcs is the procScan of /proc behind processList.
var machineProcs = newProcScan(os.DirFS("/proc"), time.Now)

// ProgramNames implements ProcessSource.
func (processList) ProgramNames(ctx context.Context) ([]string, error) {
	return machineProcs.ProgramNames(ctx)
}

// procScan is a ProcessSource over a /proc tree that keeps each process's
// names by PID. A sample lists the tree's top directory (one open) and
// reads the names of processes not seen before, of those first seen less
// than procYoung ago, and of procRecheck others in turn; the cost of a
// sample at rest does not grow with the number of processes.
//
// A process's names are what gopsutil reported before: its short name
// (/proc/PID/comm; when that is 15 characters, Linux's limit, the base name
// of the command line's first word if it begins with the short name) and
// the target of /proc/PID/exe when readable (not for other users'
// processes unless privileged).
type procScan struct {
	fsys fs.FS            // the proc root; ReadLink through fs.ReadLinkFS
	now  func() time.Time // for procYoung

	mu    sync.Mutex // guards what follows; one sample at a time
	procs map[int]*procEntry
	gen   uint64 // counts samples; an entry not listed in this one is dropped
	next  int    // where the next turn of rechecks starts, in PID order
}

// procEntry is what a procScan knows of one PID.
type procEntry struct {
	names []string  // nil when the process vanished or hid while read
	first time.Time // when first listed; zero if at the first sample
	gen   uint64    // the last sample that listed it
}

// newProcScan returns a procScan of fsys, a /proc tree (os.DirFS("/proc")
// or a fake one in tests), with now as its clock.
func newProcScan(fsys fs.FS, now func() time.Time) *procScan {
	return &procScan{fsys: fsys, now: now, procs: map[int]*procEntry{}}
}

// ProgramNames implements ProcessSource. It fails only when the tree's
// top directory cannot be listed, or when ctx ends.
func (s *procScan) ProgramNames(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ents, err := fs.ReadDir(s.fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	s.gen++
	now := s.now()
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, ok := parsePID(e.Name()); ok {
			pids = append(pids, pid)
		}
	}
	turn := map[int]bool{}
	if n := len(pids); n > 0 {
		s.next %= n
		for i := range min(procRecheck, n) {
			turn[pids[(s.next+i)%n]] = true
		}
		s.next = (s.next + procRecheck) % n
	}
	names := make([]string, 0, 2*len(pids))
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list processes: %w", err)
		}
		e := s.procs[pid]
		switch {
		case e == nil:
			e = &procEntry{first: now, names: s.read(pid)}
			if s.gen == 1 {
				// Already there when first looked at: of unknown age,
				// so not young (else every process would be read
				// again at every sample for procYoung after a start).
				e.first = time.Time{}
			}
			s.procs[pid] = e
		case turn[pid] || now.Sub(e.first) < procYoung:
			e.names = s.read(pid)
		}
		e.gen = s.gen
		names = append(names, e.names...)
	}
	for pid, e := range s.procs {
		if e.gen != s.gen {
			delete(s.procs, pid)
		}
	}
	return names, nil
}

// read returns the names of process pid, or nil when its short name cannot
// be read (it exited, or the tree hides it).
func (s *procScan) read(pid int) []string {
	dir := strconv.Itoa(pid)
	comm, err := fs.ReadFile(s.fsys, dir+"/comm")
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(string(comm), "\n")
	if len(name) >= commLen {
		if cmd, err := fs.ReadFile(s.fsys, dir+"/cmdline"); err == nil {
			args := strings.FieldsFunc(string(cmd), func(r rune) bool { return r == 0 })
			if len(args) > 0 {
				if full := path.Base(args[0]); strings.HasPrefix(full, name) {
					name = full
				}
			}
		}
	}
	var names []string
	if name != "" {
		names = append(names, name)
	}
	if exe, err := fs.ReadLink(s.fsys, dir+"/exe"); err == nil && exe != "" {
		names = append(names, exe)
	}
	return names
}

// parsePID reports whether name is a process directory's name in /proc (a
// positive decimal number) and which.
func parsePID(name string) (int, bool) {
	if name == "" || name[0] < '1' || name[0] > '9' {
		return 0, false
	}
	for _, c := range []byte(name) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	pid, err := strconv.Atoi(name)
	return pid, err == nil
}
