package release

import (
	"errors"
	"os"
	"regexp"
	"testing"
)

func TestNotes(t *testing.T) {
	log := "# Changelog\n\nintro\n\n## 1.1.0\n\n- two\n- three\n\n## 1.0.0\n\n- one\n"
	if got, err := Notes(log, "1.1.0"); err != nil || got != "- two\n- three" {
		t.Errorf("1.1.0: %q, %v", got, err)
	}
	if got, err := Notes(log, "1.0.0"); err != nil || got != "- one" {
		t.Errorf("1.0.0: %q, %v", got, err)
	}
	if _, err := Notes(log, "1.2.0"); !errors.Is(err, ErrNoChangelog) {
		t.Errorf("1.2.0: %v, want ErrNoChangelog", err)
	}
}

// TestChangelogDescribesTheVersion: make release reads the section of
// FyneApp.toml's version from CHANGELOG.md, and refuses without one.
func TestChangelogDescribesTheVersion(t *testing.T) {
	toml, err := os.ReadFile("../FyneApp.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*Version\s*=\s*"([^"]+)"`).FindSubmatch(toml)
	if m == nil {
		t.Fatal("FyneApp.toml has no Version")
	}
	log, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Notes(string(log), string(m[1])); err != nil {
		t.Error(err)
	}
}
