// Package assets holds the files the programs embed: the tray app's icons.
//
// Each icon is a PNG with an alpha channel: the three tray states are
// 64×64 pixels, the app icon 256×256. They were drawn by a small program
// (circles, a triangle and bars, supersampled 4×4) rather than in an
// editor; to change one, replace the PNG. The package imports nothing of
// the project and no GUI toolkit: package app wraps the bytes into Fyne
// resources.
package assets

import _ "embed"

// Tray icons, one per state of the donor shown in the system tray.
var (
	// IdlePNG is a grey ring with four dots: nothing to compute now, or
	// waiting for the machine to be idle.
	//
	//go:embed idle.png
	IdlePNG []byte
	// ComputingPNG is a green disc with a play triangle: tasks run.
	//
	//go:embed computing.png
	ComputingPNG []byte
	// PausedPNG is an amber disc with two bars: the owner paused, or a
	// program that pauses computing runs.
	//
	//go:embed paused.png
	PausedPNG []byte
)

// AppPNG is the app's icon (windows, the autostart entry, packages): a
// blue rounded square with four white dots joined by a ring.
//
//go:embed app.png
var AppPNG []byte
