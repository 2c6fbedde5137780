package app

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLocaleCQuiet: under LANG=C.UTF-8 (the C locale with a codeset) Fyne
// finds no language to parse and prints nothing at start, as under
// LANG=C; a locale that cannot be parsed is still reported. Fyne reads
// the locale while its packages are initialised, so the test binary is
// started again with each environment and its stderr read, the five at
// once.
func TestLocaleCQuiet(t *testing.T) {
	for _, tc := range []struct {
		name, lang string
		complaint  bool
	}{
		{"C.UTF-8", "C.UTF-8", false},
		{"POSIX", "POSIX", false},
		{"C", "C", false},
		{"English", "en_GB.UTF-8", false},
		{"not a locale", "12345_XX.UTF-8", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each its own process, started with its own environment
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			var env []string
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); k != "LC_ALL" && k != "LC_MESSAGES" && k != "LANG" && k != "LANGUAGE" {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, "LANG="+tc.lang)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the test binary with LANG=%s: %v\n%s", tc.lang, err, out)
			}
			if got := strings.Contains(string(out), "Error parsing user locale"); got != tc.complaint {
				t.Errorf("LANG=%s: complaint printed %v, want %v; output:\n%s", tc.lang, got, tc.complaint, out)
			}
		})
	}
}
