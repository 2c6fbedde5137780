// Package home decides where idlepool keeps its files: configuration
// (keys, settings), data (journals, the local store, run outputs) and
// caches (compiled WebAssembly). One directory given by --home or the
// IDLEPOOL_HOME environment variable holds all three; otherwise the
// operating system's per-user directories are used.
package home

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// EnvVar is the environment variable that sets the home directory.
const EnvVar = "IDLEPOOL_HOME"

// Dirs are the directories idlepool keeps its files in. All are absolute.
type Dirs struct {
	Config string // keys and settings
	Data   string // journals, the local store, run outputs
	Cache  string // compilation caches; safe to delete
}

// Resolve returns the directories for an explicit home (from --home; ""
// when not given). An empty home falls back to $IDLEPOOL_HOME, then to the
// OS's user directories: os.UserConfigDir and os.UserCacheDir, and for data
// $XDG_DATA_HOME or ~/.local/share on Linux and other Unixes, the config
// directory elsewhere (Application Support on macOS, %AppData% on
// Windows). Nothing is created; see Dirs.Create.
func Resolve(home string) (Dirs, error) {
	if home == "" {
		home = os.Getenv(EnvVar)
	}
	if home != "" {
		abs, err := filepath.Abs(home)
		if err != nil {
			return Dirs{}, fmt.Errorf("home %q: %w", home, err)
		}
		return Dirs{
			Config: filepath.Join(abs, "config"),
			Data:   filepath.Join(abs, "data"),
			Cache:  filepath.Join(abs, "cache"),
		}, nil
	}
	cfg, err := os.UserConfigDir()
	if err != nil {
		return Dirs{}, fmt.Errorf("find the user config directory (set --home or %s): %w", EnvVar, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return Dirs{}, fmt.Errorf("find the user cache directory (set --home or %s): %w", EnvVar, err)
	}
	data := filepath.Join(cfg, "idlepool", "data")
	if runtime.GOOS != "windows" && runtime.GOOS != "darwin" {
		if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
			data = filepath.Join(x, "idlepool")
		} else if h, err := os.UserHomeDir(); err == nil {
			data = filepath.Join(h, ".local", "share", "idlepool")
		} else {
			return Dirs{}, errors.Join(fmt.Errorf("find the user data directory (set --home or %s)", EnvVar), err)
		}
	}
	return Dirs{
		Config: filepath.Join(cfg, "idlepool"),
		Data:   data,
		Cache:  filepath.Join(cache, "idlepool"),
	}, nil
}

// Create makes the three directories (mode 0700: keys and history are
// private) if they do not exist.
func (d Dirs) Create() error {
	for _, p := range []string{d.Config, d.Data, d.Cache} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}
