// Command idlepool-window is the desktop app's window process: the tray
// app (idlepool-tray) starts it, from beside itself, when a window is
// wanted, and it shows the settings, now, browse, history and first-run
// windows until the last one closes. People do not start it themselves.
//
// Usage:
//
//	idlepool-window KIND... [--home DIR] [-v]   (KIND: now, settings, browse, history, firstrun)
//
// It is a program of its own so that the tray app, which sits in the
// tray all day, links no graphics toolkit (see package app/desktop).
// Building it needs cgo and GLFW's system libraries (on Linux the X11
// and OpenGL development packages).
package main

import (
	"os"

	"idlepool/app/desktop"
	"idlepool/app/desktop/window"
)

func main() { os.Exit(desktop.WindowMain(os.Args[1:], window.Run)) }
