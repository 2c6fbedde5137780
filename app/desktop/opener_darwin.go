package desktop

// opener is macOS's open.
func opener(url string) (string, []string, error) { return "open", []string{url}, nil }
