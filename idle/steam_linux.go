//go:build linux

package idle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// steamVDF is the GameSteam sign on Linux: the Steam client's
// registry.vdf (~/.steam/registry.vdf, or the Flatpak's under
// ~/.var/app/com.valvesoftware.Steam), where the client writes the app ID
// of the game it runs (RunningAppID, 0 when none) and its own process ID
// (ActiveProcess/pid) — the same keys it keeps in the Windows registry.
//
// RunningAppID alone outlives a Steam client that crashed, so a game
// counts only while the process ActiveProcess/pid names is alive and is
// a Steam client (its /proc comm holds "steam"). The file is parsed again
// only when its size or modification time changed: at rest a call costs
// one stat per candidate file, and, while a game runs, one small read of
// /proc/PID/comm.
//
// Rather than this, one could look for a process with SteamAppId in its
// environment, or for the "reaper SteamLaunch AppId=N" process Steam
// starts each game under; both need every process's cmdline or environ
// read at each sample, hundreds of files a second on a desktop, which is
// more than the whole idle budget of the tray app. The file is what
// Steam itself publishes for other programs.
type steamVDF struct {
	home string                            // "" is os.UserHomeDir
	proc string                            // "" is /proc
	stat func(string) (os.FileInfo, error) // os.Stat; counted in tests

	mu    sync.Mutex
	path  string // the file last parsed
	size  int64
	mtime time.Time
	reg   steamRegistry
}

var _ GameSource = (*steamVDF)(nil)

// Game implements GameSource.
func (s *steamVDF) Game(context.Context) (string, error) {
	home := s.home
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("steam: no home directory: %w", ErrNoSource)
		}
		home = h
	}
	stat := s.stat
	if stat == nil {
		stat = os.Stat
	}
	var path string
	var fi os.FileInfo
	for _, p := range []string{
		filepath.Join(home, ".steam", "registry.vdf"),
		filepath.Join(home, ".var", "app", "com.valvesoftware.Steam", ".steam", "registry.vdf"),
	} {
		if st, err := stat(p); err == nil && st.Mode().IsRegular() {
			path, fi = p, st
			break
		}
	}
	if path == "" {
		return "", fmt.Errorf("steam: no registry.vdf (Steam not installed): %w", ErrNoSource)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if path != s.path || fi.Size() != s.size || !fi.ModTime().Equal(s.mtime) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("steam: %w", err)
		}
		reg, err := parseSteamRegistry(b)
		if err != nil {
			return "", fmt.Errorf("steam: %s: %w", path, err)
		}
		s.path, s.size, s.mtime, s.reg = path, fi.Size(), fi.ModTime(), reg
	}
	if s.reg.RunningAppID == 0 || s.reg.PID <= 0 {
		return "", nil
	}
	proc := s.proc
	if proc == "" {
		proc = "/proc"
	}
	comm, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(s.reg.PID), "comm"))
	if err != nil || !strings.Contains(strings.ToLower(string(comm)), "steam") {
		return "", nil // the Steam client that wrote it is gone
	}
	return steamWhat(s.reg.RunningAppID), nil
}
