package release

import (
	"fmt"
	"strings"
)

// Notes returns the section of changelog (CHANGELOG.md's text) for
// version v: the lines after "## v" up to the next "## " heading, trimmed.
// A missing or empty section is an error wrapping ErrNoChangelog.
func Notes(changelog, v string) (string, error) {
	var out []string
	in := false
	for line := range strings.Lines(changelog) {
		line = strings.TrimRight(line, "\r\n")
		if h, ok := strings.CutPrefix(line, "## "); ok {
			if in {
				break
			}
			in = strings.TrimSpace(h) == v
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	notes := strings.TrimSpace(strings.Join(out, "\n"))
	if notes == "" {
		return "", fmt.Errorf("%w: CHANGELOG.md has no section \"## %s\" (add what changed in %s before releasing it)", ErrNoChangelog, v, v)
	}
	return notes, nil
}
