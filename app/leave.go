package app

import (
	"context"
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/widget"

	"idlepool/idle"
	"idlepool/store"
)

// This file is the confirmation before leaving a pool, and the check of
// the cores typed in the settings window.

// leaveConfirm is the open confirmation of leaving a pool.
type leaveConfirm struct {
	title  string
	text   string
	answer func(leave bool) // what the dialog's buttons call
	dialog dialog.Dialog
}

// confirmLeave asks whether to leave the pool at url, saying what
// happens to its running tasks and pending receipts; Leave leaves it.
func (f *settingsForm) confirmLeave(ctx context.Context, url, name string) {
	c := &leaveConfirm{title: "Leave " + name + "?", text: leaveText(ctx, f.u.deps, url, name)}
	c.answer = func(leave bool) {
		if f.leaving == c {
			f.leaving = nil
		}
		if leave {
			f.leavePool(ctx, url, name)
		}
	}
	msg := widget.NewLabel(c.text)
	msg.Wrapping = fyne.TextWrapWord
	d := dialog.NewCustomConfirm(c.title, "Leave", "Cancel", msg, c.answer, f.w)
	d.Resize(fyne.NewSize(460, 0))
	c.dialog = d
	f.leaving = c
	d.Show()
}

// leaveText says what leaving the pool at url does now: its running
// tasks (the engine's status) are handed back, and its results waiting
// for a receipt stay pending.
func leaveText(ctx context.Context, deps *Deps, url, name string) string {
	text := fmt.Sprintf("This computer stops taking tasks from %s at once.", name)
	tasks := 0
	if deps.Engine != nil {
		for _, r := range deps.Engine.Status().Running {
			if r.Pool == url {
				tasks++
			}
		}
	}
	switch tasks {
	case 0:
		text += " No task of it is running now."
	case 1:
		text += " The task it is running now stops and is handed back to the pool, which gives it to another computer; it earns no receipt."
	default:
		text += fmt.Sprintf(" The %d tasks it is running now stop and are handed back to the pool, which gives them to other computers; they earn no receipt.", tasks)
	}
	pending, err := deps.Store.Contributions(ctx, store.Filter{Pool: url, State: store.StatePending})
	switch {
	case err != nil:
		text += fmt.Sprintf(" (Your results waiting for a receipt could not be counted: %v.)", err)
	case len(pending) == 1:
		text += fmt.Sprintf(" One result waits for the pool's receipt: it stays in your history as pending, and its receipt is collected only if you join %s again.", name)
	case len(pending) > 1:
		text += fmt.Sprintf(" %d results wait for the pool's receipt: they stay in your history as pending, and their receipts are collected only if you join %s again.", len(pending), name)
	}
	return text + " Your confirmed receipts stay in your history."
}

// coresFit returns an error for people when a count of cores is more than
// this computer's cpus (idle.Settings.ValidateFor, as `idlepool settings
// set cores=N` checks it).
func coresFit(cores, cpus int) error {
	s := idle.Defaults()
	s.Cores = cores
	return s.ValidateFor(cpus)
}
