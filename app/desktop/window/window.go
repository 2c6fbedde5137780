// Package window is the desktop app's window process as a Fyne app: Run
// creates the Fyne App (the only code that imports fyne.io/fyne/v2/app,
// which needs cgo, GLFW and OpenGL) and shows package app's windows.
// cmd/idlepool-window passes it to desktop.WindowMain; the tray program
// (cmd/idlepool-tray) does not import it, so that the process that sits
// in the tray all day maps no graphics toolkit and a smaller program.
package window

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"

	"idlepool/app"
	"idlepool/app/desktop"
)

var _ desktop.WindowRunner = Run

// Run shows the windows of cfg.Windows over deps, then those asked for
// on "show KIND..." lines of stdin, until the last window closes or ctx
// ends (SIGINT or SIGTERM: the tray quitting). For a process started by
// the tray (cfg.FromTray), the end of stdin quits as well. A quit that
// Fyne has not carried out 10 s later exits the process: windows hold
// nothing unsaved (each saves when its Save is pressed).
func Run(ctx context.Context, deps *app.Deps, cfg desktop.WindowConfig, stdin io.Reader, log *slog.Logger) error {
	plainLocale()
	fyneapp.SetMetadata(fyne.AppMetadata{ID: desktop.AppID, Name: "idlepool", Version: "dev", Build: 1, Icon: app.AppIcon()})
	fa := fyneapp.NewWithID(desktop.AppID)
	fa.SetIcon(app.AppIcon())
	ui := app.New(fa, deps)
	show(ui, cfg.Windows, log)

	// The tray process asks for more windows on stdin. The reading
	// goroutine ends with stdin (the tray closes it when it stops this
	// process, and it ends when the tray dies) or with the process.
	// A quit asked for while Fyne is still opening the windows can be
	// lost (seen under load: the process kept running for 20 minutes
	// after SIGTERM), so the process ends by itself if Fyne has not
	// returned 10 s after the quit.
	quit := func() {
		fyne.Do(fa.Quit)
		time.AfterFunc(10*time.Second, func() {
			log.Warn("The windows did not close 10 s after quitting: exiting")
			os.Exit(0)
		})
	}
	go desktop.ReadRequests(stdin, cfg.FromTray, func(kinds []string) {
		fyne.Do(func() { show(ui, kinds, log) })
	}, quit, log)
	stop := context.AfterFunc(ctx, quit)
	defer stop()
	fa.Run()
	return nil
}

// show opens the windows of kinds (or brings them to the front). UI
// goroutine.
func show(ui *app.UI, kinds []string, log *slog.Logger) {
	for _, k := range kinds {
		switch k {
		case desktop.WindowSettings:
			ui.ShowSettings()
		case desktop.WindowBrowse:
			ui.ShowBrowse()
		case desktop.WindowHistory:
			ui.ShowHistory()
		case desktop.WindowFirstRun:
			ui.ShowFirstRun(nil)
		case desktop.WindowNow:
			ui.ShowNow()
		default:
			log.Warn("Unknown window", "window", k)
		}
	}
}

// plainLocale names English for Fyne when the locale is the C or POSIX
// one (a service, a bare session): Fyne cannot parse "C" as a language tag
// and logs an error at every start, then falls back to English anyway.
func plainLocale() {
	for _, k := range []string{"LC_ALL", "LC_MESSAGES", "LANG"} {
		switch v, _, _ := strings.Cut(os.Getenv(k), "."); v {
		case "":
			continue
		case "C", "POSIX":
			os.Setenv(k, "en")
		}
		return
	}
}
