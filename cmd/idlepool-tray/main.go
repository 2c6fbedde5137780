// Command idlepool-tray is the donor's desktop app: it lives in the system
// tray, lends this computer's idle time to the pools the owner joined
// (the same engine as `idlepool join`, in this process), and shows
// whether it computes, waits or is paused, and why. Its windows set the
// hours, cores, GPUs, programs to pause for and pools, browse the jobs
// seeking compute, and show the contribution history.
//
// Usage:
//
//	idlepool-tray [--home DIR] [--workers N] [-v]
//
// It runs as two processes. The tray process (the command above) runs
// the engine and the tray icon and its menu, and links no graphics
// toolkit, so that it stays small while it sits in the tray. The windows
// open in a window process, the program idlepool-window beside this one
// (cmd/idlepool-window), which the tray process starts when a window is
// wanted and stops when it quits; it exits when its last window closes.
// Without a system tray (no D-Bus session bus), the settings window opens
// at start and closing it quits.
//
// It keeps its state where `idlepool` does (--home or $IDLEPOOL_HOME, else
// the OS's user directories), so that `idlepool status` and `idlepool
// settings` see and change the tray's engine. A second launch shows the
// running app's settings window and exits. `idlepool-tray worker` is its
// sandboxed task subprocess; people do not start it themselves, nor the
// window process.
//
// Building it needs cgo (NVML is loaded at run time); idlepool-window
// needs GLFW's system libraries too (on Linux the X11 and OpenGL
// development packages).
package main

import (
	"os"

	"idlepool/app/desktop"
)

func main() { os.Exit(desktop.Main(os.Args[1:])) }
