package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/store"
)

// This file is the settings window: the weekly hours, the computer's
// limits (cores, memory, idle time, battery, programs, temperature), the
// GPUs and the pools joined. Save writes the first three to the local
// store in one transaction; joining and leaving a pool are saved at once.
// Either way the engine is told to reload, so changes apply without a
// restart.

// Timeouts for the window's calls that may be slow.
const (
	checkPoolTimeout = 30 * time.Second // contacting a pool
	probeTimeout     = 10 * time.Second // asking NVML or the process list
)

// ShowSettings opens the settings window (or brings it to the front) and
// returns it. Closing it discards changes not saved.
func (u *UI) ShowSettings() fyne.Window {
	var (
		f   *settingsForm
		ctx context.Context
	)
	w := u.window("settings", "idlepool settings", fyne.NewSize(760, 560), func(w fyne.Window) fyne.CanvasObject {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.Background())
		w.SetCloseIntercept(func() {
			cancel() // stops a pool check or a probe in flight
			w.Close()
		})
		f = newSettingsForm(ctx, u, w)
		return f.content
	}, nil)
	if f != nil { // a new window: fill in what takes time
		f.start(ctx)
	}
	return w
}

// settingsForm is the settings window's contents; its fields are the
// widgets, kept so that tests can type into them and tap them.
type settingsForm struct {
	u       *UI
	w       fyne.Window
	content fyne.CanvasObject
	tabs    *container.AppTabs
	owner   *ownerBox // "Your name in pools" on the Pools tab; nil when the app has no owner key

	loadErr *widget.Label  // the saved settings could not be read
	base    parsedSettings // the fields as shown when opened or last saved

	// Hours tab.
	original     idle.Schedule // the saved schedule, kept as is unless the grid changes
	anyTime      *widget.Check
	hours        *hoursGrid
	hoursChanged bool
	hoursBefore  hourGrid // the grid painted before Any time was ticked
	hoursErr     *widget.Label

	// Computer tab.
	cores          *widget.Entry
	coresErr       *widget.Label
	cpuTime        *widget.Entry // how hard to work (idle.Settings.CPUTimeShare)
	cpuTimeErr     *widget.Label
	idlePriority   *widget.Check // the OS's idle priority (not idle.Settings.NoIdlePriority)
	idleMinutes    *widget.Entry
	idleErr        *widget.Label
	idleWas        time.Duration
	maxOtherCPU    *widget.Entry
	maxOtherCPUErr *widget.Label
	memory         *widget.Entry
	memoryErr      *widget.Label
	pauseOnBattery *widget.Check
	updates        *widget.Check // keep idlepool up to date (idle.Settings.NoUpdates)
	gameFullScreen *widget.Check // the game signs (idle.GameSign)
	gameMode       *widget.Check
	gameSteam      *widget.Check
	minBattery     *widget.Entry
	minBatteryErr  *widget.Label
	maxTemp        *widget.Entry
	maxTempErr     *widget.Label
	cache          *widget.Entry
	cacheErr       *widget.Label
	shareDisk      *widget.Entry
	shareDiskErr   *widget.Label
	shareUpload    *widget.Entry
	shareUploadErr *widget.Label
	programs       []string
	programList    *fyne.Container
	programEntry   *widget.Entry
	programAdd     *widget.Button
	programPick    *widget.Button
	programErr     *widget.Label
	picker         *programPicker // the open picker; nil when none

	// GPUs tab.
	gpuBox  *fyne.Container
	gpuNote *widget.Label
	gpuRows []*gpuRow
	gpuSet  map[string]idle.GPUSettings // as saved

	// Pools tab.
	poolList   *fyne.Container
	poolURL    *widget.Entry
	poolInvite *widget.Entry
	poolJoin   *widget.Button
	poolErr    *widget.Label
	poolStatus *widget.Label
	choices    *poolChoices  // each pool's weight, limits and GPU programs
	poolURLs   []string      // the pools listed
	leaving    *leaveConfirm // the open confirmation of Leave; nil when none

	// Energy tab.
	energy energyFields

	// The bar under the tabs.
	save    *widget.Button
	saveErr *widget.Label
	status  *widget.Label

	busy sync.WaitGroup // goroutines in flight (pool checks, probes); tests wait on it
}

// gpuRow is one GPU's controls.
type gpuRow struct {
	gpu       idle.GPU
	use       *widget.Check
	memory    *widget.Entry
	memoryErr *widget.Label
	maxTemp   *widget.Entry
	maxTempEr *widget.Label
}

// programPicker is the dialog listing running programs.
type programPicker struct {
	all    []string
	shown  []string
	filter *widget.Entry
	list   *widget.List
	dialog dialog.Dialog
}

// newErrorLabel returns a red, wrapping label, hidden while it has no
// text: the inline message under a field.
func newErrorLabel() *widget.Label {
	l := widget.NewLabel("")
	l.Importance = widget.DangerImportance
	l.Wrapping = fyne.TextWrapWord
	l.Hide()
	return l
}

// setError shows msg in l, or hides l when msg is "".
func setError(l *widget.Label, msg string) {
	l.SetText(msg)
	if msg == "" {
		l.Hide()
	} else {
		l.Show()
	}
}

// hint returns a wrapping paragraph explaining a field, in the theme's
// secondary text colour: the placeholder colour, which reads well on both
// the dark and the light theme (a LowImportance label is drawn in the
// disabled colour, barely visible on the dark one). Change its text with
// setHint.
func hint(text string) *widget.RichText {
	r := widget.NewRichText(&widget.TextSegment{Text: text, Style: widget.RichTextStyle{
		ColorName: hintColor,
		Inline:    true,
		SizeName:  theme.SizeNameText,
	}})
	r.Wrapping = fyne.TextWrapWord
	return r
}

// hintColor is the colour of hints.
const hintColor = theme.ColorNamePlaceHolder

// setHint sets the text of a hint made by hint.
func setHint(r *widget.RichText, text string) {
	r.Segments[0].(*widget.TextSegment).Text = text
	r.Refresh()
}

// heading returns a bold label.
func heading(text string) *widget.Label {
	return widget.NewLabelWithStyle(text, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
}

// field is one row of a form layout: the label on the left, the entry
// with its hint and inline error on the right.
func field(label string, entry fyne.CanvasObject, help string, errLabel *widget.Label) []fyne.CanvasObject {
	right := container.NewVBox(entry)
	if help != "" {
		right.Add(hint(help))
	}
	right.Add(errLabel)
	return []fyne.CanvasObject{widget.NewLabel(label), right}
}

// newSettingsForm builds the window's contents from the store. ctx ends
// when the window closes; it bounds the calls made in the background.
func newSettingsForm(ctx context.Context, u *UI, w fyne.Window) *settingsForm {
	f := &settingsForm{u: u, w: w, loadErr: newErrorLabel()}
	s, err := u.deps.Store.Settings(ctx)
	if err != nil {
		setError(f.loadErr, fmt.Sprintf("Your saved settings could not be read, so these are the defaults: %v", err))
	}
	f.save = widget.NewButton("Save", func() { f.saveSettings(ctx) })
	f.save.Importance = widget.HighImportance
	f.saveErr = newErrorLabel()
	f.status = widget.NewLabel("")
	f.choices = newPoolChoices(ctx, u.deps.Store)

	f.tabs = container.NewAppTabs(
		container.NewTabItem("Hours", pageScroll(besideScrollBar(f.hoursTab(s)))),
		container.NewTabItem("Computer", pageScroll(besideScrollBar(f.computerTab(ctx, s)))),
		container.NewTabItem("GPUs", pageScroll(besideScrollBar(f.gpusTab(s)))),
		container.NewTabItem("Pools", pageScroll(besideScrollBar(f.poolsTab(ctx)))),
		container.NewTabItem("Energy", pageScroll(besideScrollBar(f.energyTab(s)))),
	)
	for _, it := range f.tabs.Items {
		f.watchEdits(it.Content)
	}
	// Save keeps its own height (centred) beside a message of two lines,
	// for which the bar keeps room: it does not move when one appears.
	bar := container.NewBorder(nil, nil, nil, container.NewCenter(f.save), steady(2, container.NewVBox(f.saveErr, f.status)))
	f.content = container.NewBorder(f.loadErr, container.NewPadded(bar), nil, nil, f.tabs)
	f.base, _ = f.parse() // what the window shows, for Save to write only what changed
	return f
}

// hoursTab builds the weekly hours grid.
func (f *settingsForm) hoursTab(s idle.Settings) fyne.CanvasObject {
	f.original = s.Schedule
	f.hoursErr = newErrorLabel()
	f.hours = newHoursGrid(gridFromSchedule(s.Schedule))
	f.hours.SetClock(f.u.deps.now, s.Location())
	f.hours.OnChanged = func() {
		f.edited()
		f.hoursChanged = true
		setError(f.hoursErr, "")
	}
	f.anyTime = widget.NewCheck("Any time: no limits on the hours", func(on bool) {
		f.hoursChanged = true
		setError(f.hoursErr, "")
		if on {
			f.hoursBefore = f.hours.Grid()
			var all hourGrid
			for row := range all {
				for h := range all[row] {
					all[row][h] = true
				}
			}
			f.hours.SetGrid(all)
		} else {
			before := f.hoursBefore
			if before.full() {
				before = hourGrid{}
			}
			f.hours.SetGrid(before)
		}
		f.hours.SetDisabled(on)
	})
	if len(s.Schedule) == 0 {
		f.anyTime.SetChecked(true)
		f.hoursBefore = hourGrid{}
	}
	f.hoursChanged = false

	clearButton := widget.NewButton("Clear", func() {
		f.hours.SetGrid(hourGrid{})
		f.hours.OnChanged()
	})
	zone := "this computer's time zone"
	if s.TimeZone != "" {
		zone = "the time zone " + s.TimeZone
	}
	box := container.NewVBox(
		heading("When may this computer compute?"),
		hint("Paint the hours it may compute: press on a square and drag to the opposite corner of a block of days and hours. "+
			"Starting on a coloured square erases instead. The outlined square is now. Hours are in "+zone+"."),
		f.anyTime,
		f.hours,
		f.hoursErr,
		container.NewHBox(clearButton),
	)
	for _, win := range s.Schedule {
		if win.Start%60 != 0 || win.End%60 != 0 {
			box.Add(hint(fmt.Sprintf("Your saved hours (%s) include parts of hours; the grid shows them rounded "+
				"to whole hours, and they are kept as they are unless you paint.", s.Schedule)))
			break
		}
	}
	return box
}

// computerTab builds cores, memory, idle time, battery, programs and
// temperature.
func (f *settingsForm) computerTab(ctx context.Context, s idle.Settings) fyne.CanvasObject {
	f.cores = widget.NewEntry()
	f.cores.SetPlaceHolder("all but one")
	switch {
	case s.Cores > 0:
		f.cores.SetText(strconv.Itoa(s.Cores))
	case s.CoresShare > 0:
		f.cores.SetText(formatPercent(s.CoresShare) + "%")
	}
	f.coresErr = newErrorLabel()
	f.cpuTime, f.cpuTimeErr, f.idlePriority = cpuTimeControls(s)

	f.idleWas = s.IdleFor
	f.idleMinutes = widget.NewEntry()
	f.idleMinutes.SetText(strconv.Itoa(int((s.IdleFor + time.Minute/2) / time.Minute)))
	f.idleErr = newErrorLabel()

	f.maxOtherCPU = widget.NewEntry()
	f.maxOtherCPU.SetText(formatPercent(s.MaxOtherCPUShare))
	f.maxOtherCPUErr = newErrorLabel()

	f.memory = widget.NewEntry()
	f.memory.SetText(formatPercent(s.MemoryShare))
	f.memoryErr = newErrorLabel()

	f.minBattery = widget.NewEntry()
	f.minBattery.SetText(strconv.FormatFloat(s.MinBatteryPercent, 'f', -1, 64))
	f.minBatteryErr = newErrorLabel()
	f.pauseOnBattery = widget.NewCheck("Pause while running on battery", func(on bool) {
		if on {
			f.minBattery.Disable()
		} else {
			f.minBattery.Enable()
		}
	})
	f.pauseOnBattery.SetChecked(s.PauseOnBattery)
	if s.PauseOnBattery {
		f.minBattery.Disable()
	}

	f.updates = widget.NewCheck("Keep idlepool up to date", nil)
	f.updates.SetChecked(!s.NoUpdates)

	f.gameFullScreen = widget.NewCheck("A full-screen window is in front (a game, or a film)", nil)
	f.gameFullScreen.SetChecked(s.PauseForFullScreen)
	f.gameMode = widget.NewCheck("A game uses GameMode (Feral Interactive)", nil)
	f.gameMode.SetChecked(s.PauseForGameMode)
	f.gameSteam = widget.NewCheck("Steam runs a game", nil)
	f.gameSteam.SetChecked(s.PauseForSteam)
	games := container.NewVBox(f.gameFullScreen, f.gameMode, f.gameSteam)
	if runtime.GOOS != "linux" {
		f.gameMode.Hide() // GameMode is Linux's
	}

	f.maxTemp = widget.NewEntry()
	f.maxTemp.SetText(strconv.FormatFloat(s.MaxTemperatureC, 'f', -1, 64))
	f.maxTempErr = newErrorLabel()

	f.cache = widget.NewEntry()
	f.cache.SetPlaceHolder(formatMiB(idle.DefaultCacheMiB) + " (the default)")
	if s.CacheMiB > 0 {
		f.cache.SetText(formatMiB(s.CacheMiB))
	}
	f.cacheErr = newErrorLabel()
	cacheHelp := "Disk kept for the programs and data of jobs (each file once) and their compiled code; what no task needs goes first. Empty: the default."
	if f.u.deps.Engine != nil {
		if u := f.u.deps.Engine.Status().Cache; u != nil {
			cacheHelp += " In use now: " + u.Words() + "."
		}
	}

	f.shareDisk = widget.NewEntry()
	f.shareDisk.SetPlaceHolder(formatMiB(idle.DefaultShareDiskMiB) + " (the default)")
	if s.ShareDiskMiB > 0 {
		f.shareDisk.SetText(formatMiB(s.ShareDiskMiB))
	}
	f.shareDiskErr = newErrorLabel()
	f.shareUpload = widget.NewEntry()
	f.shareUpload.SetPlaceHolder(formatKiBps(idle.DefaultShareUploadKiBps) + " (the default)")
	switch {
	case s.ShareUploadKiBps == idle.ShareUploadUnlimited:
		f.shareUpload.SetText("unlimited")
	case s.ShareUploadKiBps > 0:
		f.shareUpload.SetText(formatKiBps(s.ShareUploadKiBps))
	}
	f.shareUploadErr = newErrorLabel()

	// One form for both sections, so that their fields line up.
	form := container.New(layout.NewFormLayout(), slices.Concat(
		field("Cores to use", f.cores,
			fmt.Sprintf("A number of cores (such as 6) or a percentage (such as 75%%). This computer has %d. Leave empty to use all but one.", f.u.deps.cpus()),
			f.coresErr),
		field("Time on each core (%)", f.cpuTime, cpuTimeHelp, f.cpuTimeErr),
		[]fyne.CanvasObject{widget.NewLabel(""), container.NewVBox(f.idlePriority, hint(idlePriorityHelp))},
		field("Idle minutes", f.idleMinutes,
			"How long nobody must have used the keyboard or mouse before computing starts. 0 starts without waiting.",
			f.idleErr),
		field("Other programs (%)", f.maxOtherCPU,
			"Step aside while other programs use more than this percentage of the processor.", f.maxOtherCPUErr),
		field("Memory (%)", f.memory, "The percentage of this computer's memory tasks may use together.", f.memoryErr),
		field("Temperature limit (°C)", f.maxTemp, "Pause while the processor is hotter than this. 0: no limit.", f.maxTempErr),
		field("Disk cache", f.cache, cacheHelp, f.cacheErr),
		field("Disk to share", f.shareDisk,
			"Pieces of jobs' files kept to send to other computers of your pools, so that the pool's server need not send them all; the least recently used go first. Empty: the default.",
			f.shareDiskErr),
		field("Upload to share", f.shareUpload,
			"The most this computer sends to other computers of your pools, all pools together, such as 2 MiB/s; keep it well under your connection's upload speed. Empty: the default, "+
				formatKiBps(idle.DefaultShareUploadKiBps)+", under half of a common 20 Mbit/s home upload; unlimited: no cap.",
			f.shareUploadErr),
		[]fyne.CanvasObject{heading("Battery"), layout.NewSpacer()},
		[]fyne.CanvasObject{widget.NewLabel(""), f.pauseOnBattery},
		field("Lowest battery (%)", f.minBattery,
			"When computing on battery is allowed, stop below this charge. 0: no minimum.", f.minBatteryErr),
	)...)
	return container.NewVBox(
		heading("Processor and memory"), form,
		widget.NewSeparator(),
		heading("Pause while a game runs, when"), games,
		heading("Pause while these programs run"), f.programsBox(ctx, s.PauseFor),
		widget.NewSeparator(),
		heading("Updates"), f.updates,
		hint("At most once a day, within your hours, idlepool downloads a newer signed release, checks its signatures and installs it when no task runs; your settings and receipts stay. Off: it never checks."),
	)
}

// formatMiB writes a size in MiB as the cache field shows it: "4 GiB",
// "1.5 GiB", "500 MiB".
// formatKiBps writes an upload cap in KiB/s for the Settings field:
// 2048 → "2 MiB/s", 500 → "500 KiB/s".
func formatKiBps(n int64) string {
	if n >= 1024 {
		return strconv.FormatFloat(float64(n)/1024, 'f', -1, 64) + " MiB/s"
	}
	return strconv.FormatInt(n, 10) + " KiB/s"
}

// formatMiB writes a size in MiB for the Settings fields: 2048 → "2 GiB",
// 500 → "500 MiB".
func formatMiB(n int64) string {
	if n >= 1024 {
		return strconv.FormatFloat(float64(n)/1024, 'f', -1, 64) + " GiB"
	}
	return strconv.FormatInt(n, 10) + " MiB"
}

// formatPercent writes a share as a percentage without a sign: 0.5 → "50".
func formatPercent(share float64) string {
	return strconv.FormatFloat(share*100, 'f', -1, 64)
}

// programsBox builds the list of programs that pause computing.
func (f *settingsForm) programsBox(ctx context.Context, programs []string) fyne.CanvasObject {
	f.programs = slices.Clone(programs)
	f.programList = container.NewVBox()
	f.programErr = newErrorLabel()
	f.programEntry = widget.NewEntry()
	f.programEntry.SetPlaceHolder("program name, such as game.exe or steam")
	f.programAdd = widget.NewButton("Add", func() {
		f.addProgram(f.programEntry.Text)
		f.programEntry.SetText("")
	})
	f.programEntry.OnSubmitted = func(string) { f.programAdd.OnTapped() }
	f.programPick = widget.NewButton("Pick from running programs...", func() { f.pickProgram(ctx) })
	pickNote := hint("")
	if f.u.deps.Processes == nil {
		f.programPick.Disable()
		setHint(pickNote, "Picking from running programs is not available on this computer: type the program's name instead.")
	} else {
		pickNote.Hide()
	}
	f.refreshPrograms()
	return container.NewVBox(
		hint("Computing pauses while any of these runs, such as a game. Use the name the program has in the task manager."),
		f.programList,
		container.NewBorder(nil, nil, nil, f.programAdd, f.programEntry),
		f.programErr,
		container.NewHBox(f.programPick),
		pickNote,
	)
}

// addProgram adds name to the programs unless it is empty or there.
func (f *settingsForm) addProgram(name string) {
	name = strings.TrimSpace(name)
	setError(f.programErr, "")
	switch {
	case name == "":
		setError(f.programErr, "Type a program's name first.")
		return
	case slices.Contains(f.programs, name):
		return
	}
	f.programs = append(f.programs, name)
	f.refreshPrograms()
}

// refreshPrograms rebuilds the program rows.
func (f *settingsForm) refreshPrograms() {
	defer f.relayout(f.programList)
	f.edited()
	f.programList.RemoveAll()
	if len(f.programs) == 0 {
		f.programList.Add(hint("No programs: computing does not wait for any."))
	}
	for _, p := range f.programs {
		f.programList.Add(container.NewBorder(nil, nil, nil,
			widget.NewButton("Remove", func() {
				f.programs = slices.DeleteFunc(f.programs, func(q string) bool { return q == p })
				f.refreshPrograms()
			}),
			widget.NewLabel(p)))
	}
}

// pickProgram lists the running programs in the background and then
// shows them in a dialog to pick from.
func (f *settingsForm) pickProgram(ctx context.Context) {
	list := f.u.deps.Processes
	if list == nil {
		return
	}
	f.programPick.Disable()
	setError(f.programErr, "")
	f.busy.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		names, err := list(ctx)
		fyne.Do(func() {
			f.programPick.Enable()
			if err != nil {
				setError(f.programErr, fmt.Sprintf("Could not list the running programs: %v", err))
				return
			}
			f.showPicker(names)
		})
	})
}

// showPicker shows the dialog listing names with a filter entry.
func (f *settingsForm) showPicker(names []string) {
	p := &programPicker{all: names, shown: names}
	p.filter = widget.NewEntry()
	p.filter.SetPlaceHolder("Type to filter")
	p.list = widget.NewList(
		func() int { return len(p.shown) },
		func() fyne.CanvasObject { return widget.NewLabel("") },
		func(id widget.ListItemID, o fyne.CanvasObject) { o.(*widget.Label).SetText(p.shown[id]) },
	)
	p.filter.OnChanged = func(text string) {
		text = strings.ToLower(strings.TrimSpace(text))
		p.shown = nil
		for _, n := range p.all {
			if strings.Contains(strings.ToLower(n), text) {
				p.shown = append(p.shown, n)
			}
		}
		p.list.UnselectAll()
		p.list.Refresh()
	}
	p.list.OnSelected = func(id widget.ListItemID) {
		if id < 0 || id >= len(p.shown) {
			return
		}
		f.addProgram(p.shown[id])
		p.dialog.Hide()
	}
	content := container.NewBorder(
		container.NewVBox(hint("Pick the program that should pause computing while it runs."), p.filter),
		nil, nil, nil, p.list)
	p.dialog = dialog.NewCustom("Pick a running program", "Cancel", content, f.w)
	p.dialog.SetOnClosed(func() {
		if f.picker == p {
			f.picker = nil
		}
	})
	p.dialog.Resize(fyne.NewSize(420, 460))
	f.picker = p
	p.dialog.Show()
}

// gpuSupport says which GPUs idlepool can use, for the owner of one it
// cannot (AMD, Intel), who would otherwise see only "No NVIDIA GPU found".
const gpuSupport = "idlepool can use NVIDIA graphics cards, through NVIDIA's driver (NVML). " +
	"AMD and Intel graphics, built in or separate, are not used yet: on a computer without an NVIDIA card, " +
	"jobs compute on the processor (CPU) only."

// gpusTab lists the GPUs, once start has found them.
func (f *settingsForm) gpusTab(s idle.Settings) fyne.CanvasObject {
	f.gpuSet = s.GPUs
	f.gpuNote = widget.NewLabel("Looking for graphics cards...")
	f.gpuNote.Wrapping = fyne.TextWrapWord
	f.gpuBox = container.NewVBox()
	if f.u.deps.GPUs == nil {
		f.gpuNote.SetText("No NVIDIA GPU found: there is no NVIDIA driver to ask on this computer.")
	}
	return container.NewVBox(
		heading("Graphics cards (GPUs)"),
		hint("A GPU computes only when you turn it on here. Changes apply when you press Save."),
		hint(gpuSupport),
		f.gpuNote,
		f.gpuBox,
	)
}

// start asks for what takes time (the GPUs, from NVML) in the
// background once the window shows the form; the answer fills the form
// on the UI goroutine. ctx ends when the window closes.
func (f *settingsForm) start(ctx context.Context) {
	src := f.u.deps.GPUs
	if src == nil {
		return
	}
	f.busy.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		gpus, err := src.GPUs(ctx)
		fyne.Do(func() { f.showGPUs(gpus, err) })
	})
}

// showGPUs builds a row of controls for each GPU, or says why there are
// none.
func (f *settingsForm) showGPUs(gpus []idle.GPU, err error) {
	defer f.relayout(f.gpuBox)
	switch {
	case err != nil:
		f.gpuNote.SetText(fmt.Sprintf("No NVIDIA GPU found: %v", err))
		return
	case len(gpus) == 0:
		f.gpuNote.SetText("No NVIDIA GPU found: the NVIDIA driver lists none.")
		return
	}
	f.gpuNote.Hide()
	for _, g := range gpus {
		set := f.gpuSet[g.UUID]
		r := &gpuRow{gpu: g, memoryErr: newErrorLabel(), maxTempEr: newErrorLabel()}
		r.use = widget.NewCheck("Compute on this GPU", nil)
		r.use.SetChecked(set.Use)
		r.memory = widget.NewEntry()
		share := set.MemoryShare
		if share == 0 {
			share = idle.DefaultGPUMemoryShare
		}
		r.memory.SetText(formatPercent(share))
		r.maxTemp = widget.NewEntry()
		r.maxTemp.SetText(strconv.FormatFloat(set.MaxTemperatureC, 'f', -1, 64))
		title := g.Name
		if g.MemoryTotalMiB > 0 {
			title = fmt.Sprintf("%s (%.0f GiB)", g.Name, float64(g.MemoryTotalMiB)/1024)
		}
		form := container.New(layout.NewFormLayout(), slices.Concat(
			[]fyne.CanvasObject{widget.NewLabel(""), r.use},
			field("Memory (%)", r.memory, "The percentage of the GPU's memory tasks may use.", r.memoryErr),
			field("Temperature limit (°C)", r.maxTemp, "Pause the GPU while it is hotter than this. 0: no limit.", r.maxTempEr),
		)...)
		f.gpuRows = append(f.gpuRows, r)
		f.watchEdits(form)
		f.gpuBox.Add(container.NewVBox(heading(title), form, widget.NewSeparator()))
	}
}

// parseWhole reads a whole number from lo to hi.
func parseWhole(text string, lo, hi int) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(text))
	return n, err == nil && n >= lo && n <= hi
}

// parseNumber reads a number from lo to hi, ignoring a trailing sign
// such as "%" or "°C".
func parseNumber(text string, lo, hi float64, suffixes ...string) (float64, bool) {
	text = strings.TrimSpace(text)
	for _, s := range suffixes {
		text = strings.TrimSpace(strings.TrimSuffix(text, s))
	}
	v, err := strconv.ParseFloat(text, 64)
	return v, err == nil && v >= lo && v <= hi
}

// parsedSettings are the window's fields read and checked.
type parsedSettings struct {
	schedule         idle.Schedule
	cores            int
	coresShare       float64
	cpuTimeShare     float64
	noIdlePriority   bool
	idleFor          time.Duration
	maxOtherCPUShare float64
	memoryShare      float64
	pauseOnBattery   bool
	noUpdates        bool
	pauseFullScreen  bool
	pauseGameMode    bool
	pauseSteam       bool
	minBattery       float64
	maxTemperatureC  float64
	cacheMiB         int64
	shareDiskMiB     int64
	shareUploadKiBps int64
	pauseFor         []string
	gpus             map[string]idle.GPUSettings       // the rows shown
	pools            map[string]offers.PoolPreferences // the choices shown, by URL ("" for every pool)
	energy           energyParsed
}

// parse reads every field, setting or clearing its inline message; ok is
// false when any is invalid. bad names the tabs with invalid fields.
func (f *settingsForm) parse() (p parsedSettings, bad []int) {
	check := func(tab int, l *widget.Label, ok bool, msg string) {
		if ok {
			setError(l, "")
			return
		}
		setError(l, msg)
		if !slices.Contains(bad, tab) {
			bad = append(bad, tab)
		}
	}
	const hoursTab, computerTab, gpusTab, poolsTab, energyTab = 0, 1, 2, 3, 4

	// Hours.
	switch {
	case f.anyTime.Checked:
		p.schedule = nil
	case f.hours.Grid().empty():
		check(hoursTab, f.hoursErr, false, "Paint at least one hour, or tick Any time.")
	case !f.hoursChanged:
		p.schedule = f.original
	default:
		p.schedule = f.hours.Grid().schedule()
	}
	if !f.anyTime.Checked && !f.hours.Grid().empty() {
		setError(f.hoursErr, "")
	}

	// Computer.
	cores := strings.TrimSpace(f.cores.Text)
	ok := true
	coresMsg := "Cores must be a whole number of cores (such as 6), a percentage (such as 75%), or empty for all but one."
	switch {
	case cores == "":
	case strings.HasSuffix(cores, "%"):
		var pct float64
		pct, ok = parseNumber(cores, 0, 100, "%")
		ok = ok && pct > 0
		p.coresShare = pct / 100
	default:
		p.cores, ok = parseWhole(cores, 1, 4096)
		if err := coresFit(p.cores, f.u.deps.cpus()); ok && err != nil {
			ok, coresMsg = false, sentence(err)
		}
	}
	check(computerTab, f.coresErr, ok, coresMsg)
	p.cpuTimeShare, ok = parseCPUTime(f.cpuTime.Text)
	check(computerTab, f.cpuTimeErr, ok, cpuTimeMsg)
	p.noIdlePriority = !f.idlePriority.Checked

	minutes, ok := parseWhole(f.idleMinutes.Text, 0, 1440)
	check(computerTab, f.idleErr, ok, "Idle minutes must be a whole number from 0 to 1440.")
	p.idleFor = time.Duration(minutes) * time.Minute
	if ok && f.idleWas.Round(time.Minute) == p.idleFor {
		p.idleFor = f.idleWas // keep seconds set elsewhere (idlepool settings set idle_for=90s)
	}

	pct, ok := parseNumber(f.maxOtherCPU.Text, 1, 100, "%")
	check(computerTab, f.maxOtherCPUErr, ok, "Other programs' share of the processor must be a percentage from 1 to 100.")
	p.maxOtherCPUShare = pct / 100

	pct, ok = parseNumber(f.memory.Text, 1, 100, "%")
	check(computerTab, f.memoryErr, ok, "The memory share must be a percentage from 1 to 100.")
	p.memoryShare = pct / 100

	p.pauseOnBattery = f.pauseOnBattery.Checked
	p.noUpdates = !f.updates.Checked
	p.pauseFullScreen, p.pauseGameMode, p.pauseSteam = f.gameFullScreen.Checked, f.gameMode.Checked, f.gameSteam.Checked
	p.minBattery, ok = parseNumber(f.minBattery.Text, 0, 100, "%")
	check(computerTab, f.minBatteryErr, ok, "The minimum battery charge must be a percentage from 0 to 100 (0: no minimum).")

	p.maxTemperatureC, ok = parseNumber(f.maxTemp.Text, 0, 150, "°C", "C", "°")
	check(computerTab, f.maxTempErr, ok, "The temperature limit must be a number of °C from 0 to 150 (0: no limit).")

	mib, err := idle.ParseCacheSize(f.cache.Text)
	check(computerTab, f.cacheErr, err == nil, "The disk cache must be a size such as 2 GiB or 500 MB, or empty for the default.")
	p.cacheMiB = mib

	mib, err = idle.ParseCacheSize(f.shareDisk.Text)
	check(computerTab, f.shareDiskErr, err == nil, "The disk to share must be a size such as 2 GiB or 500 MB, or empty for the default.")
	p.shareDiskMiB = mib

	kibps, err := idle.ParseUploadRate(f.shareUpload.Text)
	check(computerTab, f.shareUploadErr, err == nil, fmt.Sprintf("The upload to share must be a rate of at least %d KiB/s, such as 2 MiB/s or 500 KB/s, unlimited, or empty for the default.", idle.MinShareUploadKiBps))
	p.shareUploadKiBps = kibps

	p.pauseFor = slices.Clone(f.programs)

	// GPUs.
	p.gpus = map[string]idle.GPUSettings{}
	for _, r := range f.gpuRows {
		g := f.gpuSet[r.gpu.UUID] // keeps the fields the window does not show
		g.Use = r.use.Checked
		pct, ok := parseNumber(r.memory.Text, 1, 100, "%")
		check(gpusTab, r.memoryErr, ok, "The GPU's memory share must be a percentage from 1 to 100.")
		g.MemoryShare = pct / 100
		g.MaxTemperatureC, ok = parseNumber(r.maxTemp.Text, 0, 150, "°C", "C", "°")
		check(gpusTab, r.maxTempEr, ok, "The GPU's temperature limit must be a number of °C from 0 to 150 (0: no limit).")
		if _, known := f.gpuSet[r.gpu.UUID]; !known && g == (idle.GPUSettings{MemoryShare: idle.DefaultGPUMemoryShare}) {
			continue // never chosen: stays out of the store, off
		}
		p.gpus[r.gpu.UUID] = g
	}

	// Energy.
	p.energy = f.energy.parse(func(l *widget.Label, ok bool, msg string) { check(energyTab, l, ok, msg) })

	// Pools.
	p.pools = f.choices.parse(f.poolURLs, func(l *widget.Label, err error) {
		msg := ""
		if err != nil {
			msg = sentence(err)
		}
		check(poolsTab, l, err == nil, msg)
	})
	return p, bad
}

// apply writes p into s, keeping the fields the window does not show
// (the owner's pause, the time zone, GPUs not present now).
//
// Only the fields the owner changed in the window (p differs from base,
// what the window showed when it opened or last saved) are written: a
// setting changed meanwhile elsewhere (`idlepool settings set`, another
// window) keeps its new value unless the owner changed it here too.
func (p parsedSettings) apply(s *idle.Settings, base parsedSettings, savedGPUs map[string]idle.GPUSettings) {
	if !slices.Equal(p.schedule, base.schedule) {
		s.Schedule = p.schedule
	}
	if p.cores != base.cores || p.coresShare != base.coresShare {
		s.Cores, s.CoresShare = p.cores, p.coresShare
	}
	if p.cpuTimeShare != base.cpuTimeShare {
		s.CPUTimeShare = p.cpuTimeShare
	}
	if p.noIdlePriority != base.noIdlePriority {
		s.NoIdlePriority = p.noIdlePriority
	}
	if p.idleFor != base.idleFor {
		s.IdleFor = p.idleFor
	}
	if p.maxOtherCPUShare != base.maxOtherCPUShare {
		s.MaxOtherCPUShare = p.maxOtherCPUShare
	}
	if p.memoryShare != base.memoryShare {
		s.MemoryShare = p.memoryShare
	}
	if p.pauseOnBattery != base.pauseOnBattery {
		s.PauseOnBattery = p.pauseOnBattery
	}
	if p.noUpdates != base.noUpdates {
		s.NoUpdates = p.noUpdates
	}
	if p.pauseFullScreen != base.pauseFullScreen {
		s.PauseForFullScreen = p.pauseFullScreen
	}
	if p.pauseGameMode != base.pauseGameMode {
		s.PauseForGameMode = p.pauseGameMode
	}
	if p.pauseSteam != base.pauseSteam {
		s.PauseForSteam = p.pauseSteam
	}
	if p.minBattery != base.minBattery {
		s.MinBatteryPercent = p.minBattery
	}
	if p.maxTemperatureC != base.maxTemperatureC {
		s.MaxTemperatureC = p.maxTemperatureC
	}
	if p.cacheMiB != base.cacheMiB {
		s.CacheMiB = p.cacheMiB
	}
	if p.shareDiskMiB != base.shareDiskMiB {
		s.ShareDiskMiB = p.shareDiskMiB
	}
	if p.shareUploadKiBps != base.shareUploadKiBps {
		s.ShareUploadKiBps = p.shareUploadKiBps
	}
	if !slices.Equal(p.pauseFor, base.pauseFor) {
		s.PauseFor = p.pauseFor
	}
	p.energy.apply(s, base.energy)
	var changed map[string]idle.GPUSettings
	for id, g := range p.gpus {
		if was, ok := savedGPUs[id]; !ok || was != g {
			if changed == nil {
				changed = map[string]idle.GPUSettings{}
			}
			changed[id] = g
		}
	}
	if len(changed) > 0 {
		gpus := maps.Clone(s.GPUs)
		if gpus == nil {
			gpus = map[string]idle.GPUSettings{}
		}
		maps.Copy(gpus, changed)
		s.GPUs = gpus
	}
}

// saveSettings checks every field and, when all are valid, saves them in
// one transaction and tells the engine to reload. It reports whether it
// saved.
func (f *settingsForm) saveSettings(ctx context.Context) bool {
	setError(f.saveErr, "")
	f.status.SetText("")
	p, bad := f.parse()
	if len(bad) > 0 {
		names := make([]string, len(bad))
		for i, t := range bad {
			names[i] = f.tabs.Items[t].Text
		}
		setError(f.saveErr, fmt.Sprintf("Not saved: fix the fields marked in red (on the %s tab).", strings.Join(names, " and ")))
		f.tabs.SelectIndex(bad[0])
		f.relayout(f.poolList) // the messages shown take room: lay the tabs out again
		return false
	}
	_, err := f.u.deps.Store.UpdateSettings(ctx, func(s *idle.Settings) error {
		p.apply(s, f.base, f.gpuSet)
		return s.Validate()
	})
	if err != nil {
		setError(f.saveErr, fmt.Sprintf("Not saved: %v", err))
		return false
	}
	if err := f.choices.save(ctx, f.u.deps.Store, p.pools); err != nil {
		setError(f.saveErr, fmt.Sprintf("Not saved: the choices for the pools: %v", err))
		return false
	}
	f.original, f.hoursChanged, f.base = p.schedule, false, p
	f.idleWas = p.idleFor
	f.gpuSet = maps.Clone(p.gpus)
	if f.u.deps.Engine != nil {
		f.u.deps.Engine.Reload()
	}
	f.status.SetText("Saved. The new settings apply now.")
	return true
}

// poolsTab lists the pools joined, with a form to join another.
func (f *settingsForm) poolsTab(ctx context.Context) fyne.CanvasObject {
	f.poolList = container.NewVBox()
	f.poolURL = widget.NewEntry()
	f.poolURL.SetPlaceHolder("https://pool.example.org")
	f.poolInvite = widget.NewEntry()
	f.poolInvite.SetPlaceHolder("only if the pool gave you one")
	f.poolErr = newErrorLabel()
	f.poolStatus = widget.NewLabel("")
	f.poolStatus.Wrapping = fyne.TextWrapWord
	f.poolJoin = widget.NewButton("Join", func() { f.joinPool(ctx) })
	joinNote := hint("Joining and leaving take effect at once; the choices for the pools apply when you press Save.")
	if f.u.deps.CheckPool == nil {
		f.poolJoin.Disable()
		setHint(joinNote, "Joining a pool is not available in this build of the app.")
	}
	f.refreshPools(ctx)
	form := container.New(layout.NewFormLayout(),
		widget.NewLabel("Pool address"), f.poolURL,
		widget.NewLabel("Invite token"), f.poolInvite,
	)
	// Joining comes first, so that the Join button shows when the tab
	// opens, above the pools joined and their choices, which grow with
	// every pool.
	tab := container.NewVBox(
		heading("Join a pool"),
		joinNote,
		form,
		f.poolErr,
		container.NewHBox(f.poolJoin),
		f.poolStatus,
		widget.NewSeparator(),
		heading("Pools this computer computes for"),
		f.poolList,
		widget.NewSeparator(),
		f.choices.globalBox(),
	)
	if f.owner = newOwnerBox(f.u); f.owner != nil {
		tab.Add(widget.NewSeparator())
		tab.Add(f.owner.box)
	}
	return tab
}

// refreshPools rebuilds the list of pools joined from the store.
func (f *settingsForm) refreshPools(ctx context.Context) {
	defer f.relayout(f.poolList)
	f.poolList.RemoveAll()
	pools, err := f.u.deps.Store.JoinedPools(ctx)
	if err != nil {
		l := newErrorLabel()
		setError(l, fmt.Sprintf("Could not read the pools joined: %v", err))
		f.poolList.Add(l)
		return
	}
	if len(pools) == 0 {
		f.poolList.Add(hint("None yet. Without a pool this computer stays ready for your own (solo) runs."))
	}
	f.poolURLs = f.poolURLs[:0]
	for _, p := range pools {
		name := p.Name
		if name == "" {
			name = "(pool without a name)"
		}
		leave := widget.NewButton("Leave", func() { f.confirmLeave(ctx, p.URL, name) })
		// The button keeps its own height, beside the name and address.
		f.poolList.Add(container.NewBorder(nil, nil, nil, container.NewCenter(leave),
			container.NewVBox(widget.NewLabelWithStyle(name, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), widget.NewLabel(p.URL))))
		_, had := f.choices.rows[p.URL]
		row := f.choices.row(p.URL)
		if !had && f.tabs != nil { // the first rows are watched with the tabs
			f.watchEdits(row.form)
		}
		f.poolList.Add(row.form)
		f.poolURLs = append(f.poolURLs, p.URL)
	}
}

// edited clears the "Saved" status once a field changed after Save.
// UI goroutine.
func (f *settingsForm) edited() {
	if f.status != nil && f.status.Text != "" {
		f.status.SetText("")
	}
}

// watchEdits makes the entries and checks under o call edited when the
// person changes them, besides what they did already.
func (f *settingsForm) watchEdits(o fyne.CanvasObject) {
	switch o := o.(type) {
	case *fyne.Container:
		for _, c := range o.Objects {
			f.watchEdits(c)
		}
	case *container.Scroll:
		f.watchEdits(o.Content)
	case *widget.Entry:
		prev := o.OnChanged
		o.OnChanged = func(s string) {
			f.edited()
			if prev != nil {
				prev(s)
			}
		}
	case *widget.Check:
		prev := o.OnChanged
		o.OnChanged = func(on bool) {
			f.edited()
			if prev != nil {
				prev(on)
			}
		}
	}
}

// relayout lays the tabs out again after list, a box of rows, was
// rebuilt: a container's RemoveAll and Add lay out only the box itself,
// so that at its new height its rows would be drawn over what follows it
// until the tab was shown again. UI goroutine.
func (f *settingsForm) relayout(list *fyne.Container) {
	list.Refresh()
	if f.tabs == nil { // the tabs are being built
		return
	}
	for _, it := range f.tabs.Items {
		it.Content.Refresh() // the scroll sizes its content to the new height
	}
}

// leavePool leaves the pool at url and tells the engine.
func (f *settingsForm) leavePool(ctx context.Context, url, name string) {
	setError(f.poolErr, "")
	if err := f.u.deps.Store.LeavePool(ctx, url); err != nil {
		setError(f.poolErr, fmt.Sprintf("Could not leave %s: %v", name, err))
		return
	}
	f.refreshPools(ctx)
	if f.u.deps.Engine != nil {
		f.u.deps.Engine.Reload()
	}
	f.poolStatus.SetText(fmt.Sprintf("Left %s. This computer no longer computes for it.", name))
}

// joinPool checks the address, then contacts the pool in the background
// and records it when it answers.
func (f *settingsForm) joinPool(ctx context.Context) {
	f.poolStatus.SetText("")
	addr, err := newPoolAddress(ctx, f.u.deps.Store, f.poolURL.Text)
	if err != nil {
		setError(f.poolErr, sentence(err))
		return
	}
	setError(f.poolErr, "")
	invite := strings.TrimSpace(f.poolInvite.Text)
	f.poolJoin.Disable()
	f.poolStatus.SetText("Contacting the pool at " + addr + "...")
	f.busy.Go(func() {
		name, err := joinPool(ctx, f.u.deps, addr, invite)
		fyne.Do(func() {
			f.poolJoin.Enable()
			if err != nil {
				f.poolStatus.SetText("")
				setError(f.poolErr, sentence(err))
				return
			}
			f.poolURL.SetText("")
			f.poolInvite.SetText("")
			f.refreshPools(ctx)
			if f.u.deps.Engine != nil {
				f.u.deps.Engine.Reload()
			}
			if name == "" {
				name = addr
			}
			f.poolStatus.SetText(fmt.Sprintf("Joined %s. This computer computes for it when it is idle.", name))
		})
	})
}

// sentence returns err's message with its first letter upper-case, to
// show under a field.
func sentence(err error) string {
	msg := err.Error()
	if msg == "" {
		return "Something went wrong, without a message saying what."
	}
	r, n := utf8.DecodeRuneInString(msg)
	return string(unicode.ToUpper(r)) + msg[n:]
}

// poolAddress checks that text is a pool's address, an http or https URL
// with a host (a cluster's: its nodes' URLs separated by commas), and
// returns it normalised by agent.CanonicalPoolURL: without spaces or
// trailing slashes (any other path is kept), a cluster's nodes sorted, so
// that one pool typed two ways is one address. Its error is a message for
// people (sentence shows it).
func poolAddress(text string) (string, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return "", errors.New("type the pool's address first, such as https://pool.example.org")
	}
	addr, err := agent.CanonicalPoolURL(text)
	if err != nil {
		return "", fmt.Errorf("%q is not a pool address: it must start with http:// or https:// and name the pool's computer, such as https://pool.example.org (a cluster: its computers' addresses separated by commas)", text)
	}
	return addr, nil
}

// normalPoolURL is a recorded pool URL as poolAddress normalises it; one
// that does not parse, without surrounding spaces or trailing slashes.
func normalPoolURL(s string) string {
	if addr, err := agent.CanonicalPoolURL(s); err == nil {
		return addr
	}
	return strings.TrimRight(strings.TrimSpace(s), "/")
}

// newPoolAddress is poolAddress of text, refused also when that pool is
// joined already (notJoined): the check of the settings window's and the
// first-run window's Join before they contact the pool.
func newPoolAddress(ctx context.Context, st *store.Local, text string) (string, error) {
	addr, err := poolAddress(text)
	if err != nil {
		return "", err
	}
	return addr, notJoined(ctx, st, addr)
}

// notJoined returns an error, a message for people, when the pool at
// addr (normalised by poolAddress) is already joined, also when it was
// recorded with a trailing slash.
func notJoined(ctx context.Context, st *store.Local, addr string) error {
	pools, err := st.JoinedPools(ctx)
	if err != nil {
		return fmt.Errorf("could not read the pools joined: %w", err)
	}
	for _, p := range pools {
		if normalPoolURL(p.URL) == addr {
			name := p.Name
			if name == "" {
				name = "the pool at " + addr
			}
			return fmt.Errorf("already joined: this computer computes for %s", name)
		}
	}
	return nil
}

// joinPool contacts the pool at addr through deps.CheckPool and, when it
// answers, records it as joined (with invite) and known by its name. Its
// error is a message for people: CheckPool's own, or one saying what
// failed after the pool answered. It is safe to call off the UI goroutine.
func joinPool(ctx context.Context, deps *Deps, addr, invite string) (name string, err error) {
	if deps.CheckPool == nil {
		return "", errors.New("joining a pool is not available in this build of the app")
	}
	ctx, cancel := context.WithTimeout(ctx, checkPoolTimeout)
	defer cancel()
	name, err = deps.CheckPool(ctx, addr, invite)
	if err != nil {
		return "", err
	}
	if err := deps.Store.JoinPool(ctx, addr, invite); err != nil {
		return "", fmt.Errorf("the pool answered, but it could not be recorded: %w", err)
	}
	if err := deps.Store.AddPool(ctx, addr, name); err != nil {
		return "", fmt.Errorf("the pool answered, but its name could not be recorded: %w", err)
	}
	return name, nil
}
