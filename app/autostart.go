package app

// autostartName is the name of the start-at-login entry: the .desktop
// file's base name on Linux, the Run value on Windows (macOS names its
// LaunchAgent autostartLabel).
const autostartName = "idlepool-tray"

// NewAutostart returns the start-at-login entry that starts the program
// exe (an absolute path, from os.Executable) with no arguments: an XDG
// autostart file ($XDG_CONFIG_HOME/autostart/idlepool-tray.desktop,
// default ~/.config/autostart) on Linux, the idlepool-tray value of
// HKCU\Software\Microsoft\Windows\CurrentVersion\Run on Windows, and
// ~/Library/LaunchAgents/org.idlepool.tray.plist on macOS. On other
// systems it returns nil, which hides the tray's "Start at login". The
// entry is only read or written when its methods are called.
func NewAutostart(exe string) Autostart { return newAutostart(exe) }
