//go:build !unix

package agent

// Restart ends this program's part in an update: on Windows the
// installer the self-update started (/S /RESTART) stops the running
// programs, installs the new version and starts the tray app again, so
// this one only returns, to exit.
func Restart() error { return nil }
