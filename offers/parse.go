package offers

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The donor's per-pool choices as a person types them, checked once here
// for `idlepool jobs weight|limits|gpu-programs` and the tray's settings
// window alike. Each error says what the value wants.

// MaxWeight bounds a pool's weight: weights are relative, and a million
// to one is as lopsided as any donor means.
const MaxWeight = 1e6

// ParseWeight reads a pool's weight (PoolPreferences.Weight): a number
// from 0 (offers the pool nothing) to MaxWeight.
func ParseWeight(v string) (float64, error) {
	v = strings.TrimSpace(v)
	w, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(w) || w < 0 || w > MaxWeight {
		return 0, fmt.Errorf("weight takes a number of 0 or more (such as 1 or 2.5; 0 offers the pool nothing), got %q", v)
	}
	return w, nil
}

// ParseTaskMemoryMiB reads a per-task memory ceiling
// (PoolPreferences.MaxMemoryMiB) in MiB: a whole number, 0 or "" for no
// ceiling.
func ParseTaskMemoryMiB(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("memory takes MiB as a whole number (such as 2048; 0 for no ceiling), got %q", v)
	}
	return n, nil
}

// ParseTaskTime reads a per-task time ceiling (PoolPreferences.MaxTaskTime):
// a duration such as 90s, 30m or 2h; 0 or "" for no ceiling.
func ParseTaskTime(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("time takes a duration such as 90s, 30m or 2h (0 for no ceiling), got %q", v)
	}
	return d, nil
}

// ParseOnOff reads whether GPU programs are allowed
// (PoolPreferences.GPUPrograms): on, yes or true, or off, no or false.
func ParseOnOff(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "yes", "true":
		return true, nil
	case "off", "no", "false":
		return false, nil
	}
	return false, fmt.Errorf("gpu-programs takes on or off, got %q", v)
}
