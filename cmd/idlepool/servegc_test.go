package main

import (
	"errors"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// A coordinator collects at serveGCPercent unless the operator set
// GOGC, which is left as it is.
func TestTuneServeGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if got := tuneServeGC(func(string) string { return "" }); got != serveGCPercent {
		t.Errorf("without GOGC: %d in force, want %d", got, serveGCPercent)
	}
	debug.SetGCPercent(80) // as GOGC=80 would have set it at start
	if got := tuneServeGC(func(k string) string { return map[string]string{"GOGC": "80"}[k] }); got != 80 {
		t.Errorf("with GOGC=80: %d in force, want 80 left as it is", got)
	}
}

// A coordinator's soft memory limit is serveMemoryRatio of what it may
// use, unless GOMEMLIMIT or AUTOMEMLIMIT says otherwise; a provider that
// fails, or an AUTOMEMLIMIT that is no ratio, leaves it as it was.
func TestTuneServeMemory(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	const gib = 1 << 30
	machine := func() (uint64, error) { return gib, nil }
	notAsked := func() (uint64, error) {
		t.Error("the provider was asked though the environment sets the limit")
		return gib, nil
	}
	for _, c := range []struct {
		name, gomemlimit, automemlimit string
		provider                       func() (uint64, error)
		want                           int64 // the limit in force after; 0: the one before
		wantErr                        string
	}{
		{name: "a ninth less than the machine", provider: machine, want: gib * 9 / 10},
		{name: "AUTOMEMLIMIT's ratio", automemlimit: "0.5", provider: machine, want: gib / 2},
		{name: "AUTOMEMLIMIT off", automemlimit: "off", provider: notAsked},
		{name: "GOMEMLIMIT set", gomemlimit: "512MiB", provider: notAsked},
		{name: "AUTOMEMLIMIT not a number", automemlimit: "most", provider: notAsked, wantErr: "cannot parse AUTOMEMLIMIT: most"},
		{name: "AUTOMEMLIMIT out of range", automemlimit: "1.5", provider: notAsked, wantErr: "ratio should be in the range"},
		{name: "no limit known", provider: func() (uint64, error) { return 0, memlimit.ErrNoLimit }, want: math.MaxInt64},
		{name: "the provider fails", provider: func() (uint64, error) { return 0, errors.New("no /proc") }, wantErr: "no /proc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", c.gomemlimit)
			t.Setenv("AUTOMEMLIMIT", c.automemlimit)
			if c.automemlimit == "" {
				os.Unsetenv("AUTOMEMLIMIT") // set but empty would be a ratio that does not parse
			}
			const before = 3 * gib
			debug.SetMemoryLimit(before)
			got, err := tuneServeMemory(c.provider)
			want := c.want
			if want == 0 {
				want = before
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("error %v, want one saying %q", err, c.wantErr)
			}
			if c.wantErr == "" && err != nil {
				t.Errorf("error %v", err)
			}
			if got != want || debug.SetMemoryLimit(-1) != want {
				t.Errorf("returned %d, in force %d, want %d", got, debug.SetMemoryLimit(-1), want)
			}
		})
	}
}

// serve refuses to start, saying why, when AUTOMEMLIMIT is no ratio.
func TestServeRefusesABadMemoryRatio(t *testing.T) {
	t.Setenv("AUTOMEMLIMIT", "half")
	out := idlepool(t, t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--pool", "p")
	if out.code != 2 || !strings.Contains(out.stderr, "cannot set the coordinator's memory limit: cannot parse AUTOMEMLIMIT: half") ||
		!strings.Contains(out.stderr, `AUTOMEMLIMIT is "off" or the share`) {
		t.Errorf("exit %d, stderr:\n%s", out.code, out.stderr)
	}
}
