//go:build unix && !darwin

package desktop

// opener is xdg-open, as on Linux and the BSDs' desktops.
func opener(url string) (string, []string, error) { return "xdg-open", []string{url}, nil }
