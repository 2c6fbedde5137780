//go:build darwin

package app

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
)

// autostartLabel is the LaunchAgent's label and file name.
const autostartLabel = "org.idlepool.tray"

// launchAgent is a per-user LaunchAgent that launchd loads at login:
// ~/Library/LaunchAgents/org.idlepool.tray.plist, RunAtLoad.
type launchAgent struct{ exe, home string }

func newAutostart(exe, home string) Autostart { return launchAgent{exe: exe, home: home} }

func (a launchAgent) path() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("autostart: find the home directory: %w", err)
	}
	return filepath.Join(home, "Library", "LaunchAgents", autostartLabel+".plist"), nil
}

// plist is the property list Enable writes.
func (a launchAgent) plist() []byte {
	var args bytes.Buffer
	for _, s := range autostartArgs(a.exe, a.home) {
		args.WriteString("\t\t<string>")
		_ = xml.EscapeText(&args, []byte(s))
		args.WriteString("</string>\n")
	}
	return []byte(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + autostartLabel + `</string>
	<key>ProgramArguments</key>
	<array>
` + args.String() + `	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>ProcessType</key>
	<string>Interactive</string>
</dict>
</plist>
`)
}

// Enabled reports whether the file exists and is the one Enable writes
// for exe and this home.
func (a launchAgent) Enabled() (bool, error) {
	p, err := a.path()
	if err != nil {
		return false, err
	}
	b, found, err := readAutostartFile(p)
	if !found || err != nil {
		return false, err
	}
	return bytes.Equal(b, a.plist()), nil
}

// Enable writes the file (and ~/Library/LaunchAgents, if missing). It
// takes effect at the next login; the running app is not started twice.
func (a launchAgent) Enable() error {
	p, err := a.path()
	if err != nil {
		return err
	}
	return writeAutostartFile(p, a.plist())
}

// Disable removes the file; nil if there is none.
func (a launchAgent) Disable() error {
	p, err := a.path()
	if err != nil {
		return err
	}
	return removeAutostartFile(p)
}
