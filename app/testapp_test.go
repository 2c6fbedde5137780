package app

import (
	"slices"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
)

// sharedApp is the one Fyne test app of the package's tests, made at the
// first testApp. test.NewTempApp makes an app at each call and another at
// cleanup, and each new app empties Fyne's caches of font faces and of
// measured text, which the next window then fills again: shaping every
// label and wrapped hint anew took about 3 s per settings window under
// the race detector, against a tenth of that with the caches kept. The
// caches are keyed by the text, its size, style and font, so a window
// measures the same on a kept cache as on an empty one.
var sharedApp fyne.App

// testApp returns the package's test app as fyne.CurrentApp, for one test:
// at its cleanup the windows it left open are closed (not the driver's
// own first window, which a new app has too) and a theme the test set is
// put back, so that each test starts as on a new app (the windows here
// use the app for nothing but its windows and its theme).
func testApp(t testing.TB) fyne.App {
	t.Helper()
	if sharedApp == nil {
		sharedApp = test.NewApp()
	}
	a := sharedApp
	fyne.SetCurrentApp(a)
	th := a.Settings().Theme()
	before := slices.Clone(a.Driver().AllWindows())
	t.Cleanup(func() {
		for _, w := range slices.Clone(a.Driver().AllWindows()) {
			if !slices.Contains(before, w) {
				w.Close()
			}
		}
		if a.Settings().Theme() != th {
			a.Settings().SetTheme(th)
		}
	})
	return a
}
