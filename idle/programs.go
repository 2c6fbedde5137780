package idle

import "strings"

// commLen is the length to which Linux truncates a process's short name
// (TASK_COMM_LEN 16 less the terminating NUL).
const commLen = 15

// programKey is how program names compare: the base name (after the last
// '/' or '\'), lower case, without a trailing ".exe".
func programKey(name string) string {
	name = strings.TrimSpace(name)
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.ToLower(name)
	return strings.TrimSuffix(name, ".exe")
}

// MatchPrograms returns the names in want (as written there, in that order,
// once each) that match a name in running. Names match by executable base
// name, case-insensitively, with or without ".exe" and a directory; a
// running name of exactly 15 characters also matches a wanted name that
// begins with it, because Linux truncates process names to 15.
func MatchPrograms(want, running []string) []string {
	have := make(map[string]bool, len(running))
	var truncated []string
	for _, r := range running {
		base := strings.TrimSpace(r)
		if i := strings.LastIndexAny(base, `/\`); i >= 0 {
			base = base[i+1:]
		}
		if len(base) == commLen {
			truncated = append(truncated, strings.ToLower(base))
		}
		have[programKey(r)] = true
	}
	found := []string{}
	seen := map[string]bool{}
	for _, w := range want {
		k := programKey(w)
		if k == "" || seen[k] {
			continue
		}
		match := have[k]
		if !match && len(k) >= commLen {
			lw := strings.ToLower(w[strings.LastIndexAny(w, `/\`)+1:])
			for _, t := range truncated {
				if strings.HasPrefix(lw, t) {
					match = true
					break
				}
			}
		}
		if match {
			seen[k] = true
			found = append(found, w)
		}
	}
	return found
}
