package desktop

// opener is the URL handler of url.dll, which opens a file URL with the
// program its type is registered to.
func opener(url string) (string, []string, error) {
	return "rundll32", []string{"url.dll,FileProtocolHandler", url}, nil
}
