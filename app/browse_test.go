package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/store"
)

// The boards of the browse tests: pool alpha lists a CPU job this machine
// matches and a GPU job it does not; the pool at http://down cannot be
// read. (The real agent.Board is tested in package agent against a real
// coordinator.)
var (
	cpuJobID = job.ID(sha256.Sum256([]byte("squares")))
	gpuJobID = job.ID(sha256.Sum256([]byte("render")))
	gpuWhy   = []string{"needs a GPU with 8 GiB; this machine offers none", "needs a GPU program; you have not allowed GPU programs in this pool"}
)

func testBoards() []agent.PoolBoard {
	return []agent.PoolBoard{
		{URL: "http://a", Name: "alpha", Offer: &offers.Offer{Pool: "alpha"}, Jobs: []agent.BoardJob{
			{Listing: offers.Listing{Job: cpuJobID, Name: "squares", Description: "Sums of squares.", Owner: "idk3m9x2qa7hxyzw0000000000000000aa",
				Pool: "alpha", MemoryMiB: 256, TimeLimit: 5 * time.Minute, CostPerTask: 1.5, TasksLeft: 40, TasksDone: 2, Quorum: 2, Participants: "open"},
				Match: true, Why: []string{}},
			{Listing: offers.Listing{Job: gpuJobID, Name: "render", Description: "Renders frames.", Owner: "idz9y8x7w6v5u4t3s2r1q0p9o8n7m6l5kk",
				Pool: "alpha", Requirements: job.Requirements{GPU: job.GPURequired, GPUMemoryMiB: 8192, GPUComputeCapability: "8.0"},
				MemoryMiB: 2048, CostPerTask: 12, TasksLeft: 7, Quorum: 1, Participants: "invite"},
				Why: gpuWhy},
		}},
		{URL: "http://down", Error: "cannot reach the pool at http://down: connection refused", Jobs: []agent.BoardJob{}},
	}
}

// testBrowse is a browse view whose loads deliver to loop, over a real
// store with the test boards' pools joined.
type testBrowse struct {
	*browseView
	loop   *uiLoop
	store  *store.Local
	engine *countingEngine
	boards *atomic.Int64 // Board calls
}

func (v testBrowse) settle() { v.loop.settle(&v.loading) }

func newTestBrowse(t *testing.T, join ...string) testBrowse {
	t.Helper()
	l := openHistoryStore(t)
	for _, url := range join {
		if err := l.JoinPool(context.Background(), url, ""); err != nil {
			t.Fatal(err)
		}
	}
	calls := new(atomic.Int64)
	e := &countingEngine{}
	u := New(testApp(t), &Deps{Store: l, Engine: e, Board: func(context.Context) ([]agent.PoolBoard, error) {
		calls.Add(1)
		return testBoards(), nil
	}})
	v := testBrowse{u.newBrowseView(), newUILoop(), l, e, calls}
	v.do = v.loop.do
	return v
}

func (v testBrowse) columns(row int) []string {
	var out []string
	for c := range browseColumns {
		out = append(out, v.cell(row, c))
	}
	return out
}

func TestBrowseBoard(t *testing.T) {
	v := newTestBrowse(t, "http://a", "http://down")
	v.load()
	if v.status.Text != labelLoading {
		t.Errorf("status while loading %q", v.status.Text)
	}
	v.settle()
	if v.status.Text != "2 jobs in 1 pool; 1 match this machine." {
		t.Errorf("status %q", v.status.Text)
	}
	if !v.errors.Visible() || v.errors.Text != "Pool http://down: cannot reach the pool at http://down: connection refused" {
		t.Errorf("errors (shown %v): %q", v.errors.Visible(), v.errors.Text)
	}
	want := [][]string{
		{"squares\nSums of squares.", "idk3m9x2qa…", "alpha", "CPU, 256 MiB, up to 5 min", "40", "✓ matches"},
		{"render\nRenders frames.", "idz9y8x7w6…", "alpha", "GPU 8 GiB cc 8.0+, 2 GiB, no time limit", "7", "✗ " + gpuWhy[0]},
	}
	if diff := cmp.Diff(want, [][]string{v.columns(0), v.columns(1)}); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if !v.acceptJob.Disabled() {
		t.Error("Accept this job is enabled with no job selected")
	}

	v.table.Select(widgetCell(1))
	for _, s := range append([]string{"Renders frames.", gpuJobID.String(), "Quorum: 1", "Participants: the pool's invited peers",
		"Cost per task: 12 cost units", "idz9y8x7w6v5u4t3s2r1q0p9o8n7m6l5kk", "Pool: alpha (http://a)", "GPU: needs a GPU"}, gpuWhy...) {
		if !strings.Contains(v.details.Text, s) {
			t.Errorf("details lack %q:\n%s", s, v.details.Text)
		}
	}
	if v.acceptJob.Disabled() || v.choice.Text != "You have made no choice about this job or its owner." {
		t.Errorf("choice %q, Accept this job disabled %v", v.choice.Text, v.acceptJob.Disabled())
	}
}

func TestBrowseChoices(t *testing.T) {
	ctx := context.Background()
	v := newTestBrowse(t, "http://a", "http://down")
	v.load()
	v.settle()
	v.table.Select(widgetCell(1)) // the GPU job
	owner := v.rows[1].job.Listing.Owner

	prefsOf := func() offers.PoolPreferences {
		t.Helper()
		p, err := v.store.Preferences(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pp, _ := p.Pool("http://a")
		return pp
	}
	for i, step := range []struct {
		button *widget.Button
		check  func(offers.PoolPreferences) bool
		choice string
	}{
		{v.acceptJob, func(p offers.PoolPreferences) bool { return slices.Equal(p.AcceptJobs, []job.ID{gpuJobID}) },
			"You accept this job in this pool."},
		{v.refuseOwner, func(p offers.PoolPreferences) bool {
			return slices.Equal(p.RefuseOwners, []string{owner}) && slices.Equal(p.AcceptJobs, []job.ID{gpuJobID})
		}, "You accept this job in this pool.\nYou refuse this owner's jobs in this pool."},
		{v.refuseJob, func(p offers.PoolPreferences) bool {
			return slices.Equal(p.RefuseJobs, []job.ID{gpuJobID}) && len(p.AcceptJobs) == 0
		}, "You refuse this job in this pool.\nYou refuse this owner's jobs in this pool."},
		{v.acceptOwner, func(p offers.PoolPreferences) bool {
			return slices.Equal(p.AcceptOwners, []string{owner}) && len(p.RefuseOwners) == 0
		}, "You refuse this job in this pool.\nYou prefer this owner's jobs in this pool."},
		{v.clearChoice, func(p offers.PoolPreferences) bool {
			return len(p.AcceptJobs)+len(p.RefuseJobs)+len(p.AcceptOwners)+len(p.RefuseOwners) == 0
		}, "You have made no choice about this job or its owner."},
	} {
		test.Tap(step.button)
		if p := prefsOf(); !step.check(p) {
			t.Errorf("after %s: preferences %+v", step.button.Text, p)
		}
		if v.choice.Text != step.choice {
			t.Errorf("after %s: choice shown %q, want %q", step.button.Text, v.choice.Text, step.choice)
		}
		if n := v.engine.reloads.Load(); n != int64(i+1) {
			t.Errorf("after %s: %d engine reloads, want %d", step.button.Text, n, i+1)
		}
		v.settle() // the boards are read again, the job stays selected
		if n := v.boards.Load(); n != int64(i+2) {
			t.Errorf("after %s: %d board reads, want %d", step.button.Text, n, i+2)
		}
		if v.selected != 1 || v.rows[1].job.Listing.Job != gpuJobID || v.choice.Text != step.choice {
			t.Errorf("after %s and reading the boards again: row %d selected, choice %q", step.button.Text, v.selected, v.choice.Text)
		}
	}
}

func TestBrowseNoPools(t *testing.T) {
	v := newTestBrowse(t)
	v.load()
	v.settle()
	if v.status.Text != noPoolsText || len(v.rows) != 0 {
		t.Errorf("status %q, %d rows", v.status.Text, len(v.rows))
	}
	if n := v.boards.Load(); n != 0 {
		t.Errorf("Board read %d times with no pool joined", n)
	}
}

func TestBrowseBoardFails(t *testing.T) {
	l := openHistoryStore(t)
	if err := l.JoinPool(context.Background(), "http://a", ""); err != nil {
		t.Fatal(err)
	}
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Board: func(context.Context) ([]agent.PoolBoard, error) {
		return nil, errors.New("the keys are unreadable")
	}})
	v := testBrowse{browseView: u.newBrowseView(), loop: newUILoop()}
	v.do = v.loop.do
	v.load()
	v.settle()
	if v.status.Text != "Cannot read the job boards: the keys are unreadable" {
		t.Errorf("status %q", v.status.Text)
	}

	// Without Board the window says it cannot browse.
	u.deps.Board = nil
	v.load()
	v.settle()
	if !strings.HasPrefix(v.status.Text, "Browsing jobs is not available here") {
		t.Errorf("status without Board %q", v.status.Text)
	}
}

// TestShowBrowseWindow: the window opens once, reads the boards off the
// UI goroutine (Loading... meanwhile), and closing it cancels a reading
// in progress.
func TestShowBrowseWindow(t *testing.T) {
	l := openHistoryStore(t)
	if err := l.JoinPool(context.Background(), "http://a", ""); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	cancelled := make(chan error, 4)
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Board: func(ctx context.Context) ([]agent.PoolBoard, error) {
		started <- struct{}{}
		select {
		case <-release:
			return testBoards(), nil
		case <-ctx.Done():
			cancelled <- ctx.Err()
			return nil, ctx.Err()
		}
	}})
	w, v := u.showBrowse()
	if v == nil || w.Title() != "Browse jobs" {
		t.Fatalf("window %q, view %v", w.Title(), v)
	}
	<-started
	if v.status.Text != labelLoading {
		t.Errorf("status while the board is read: %q", v.status.Text)
	}
	if w2 := u.ShowBrowse(); w2 != w {
		t.Error("a second ShowBrowse made another window")
	}
	close(release)
	v.loading.Wait()
	if len(v.rows) != 2 {
		t.Errorf("%d rows after loading", len(v.rows))
	}

	w, v = u.showBrowse() // open still: no new view
	if v != nil {
		t.Error("ShowBrowse made a new view for an open window")
	}
	w.Close()
	if _, open := u.windows["browse"]; open {
		t.Error("the closed window is still known")
	}

	release = make(chan struct{}) // the next reading blocks until cancelled
	w, v = u.showBrowse()
	<-started
	w.Close()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Board's context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the window did not cancel the reading")
	}
	v.loading.Wait()
}

// TestBrowseShowsWholeDescription: a job's description longer than its
// cell is cut there after a whole word, with "…", and the details pane
// shows it whole, its paragraphs kept, drawn whole in a pane that
// scrolls to its end; the pane cut it at 1,000 characters on one line.
func TestBrowseShowsWholeDescription(t *testing.T) {
	var words []string
	for i := range 400 {
		words = append(words, fmt.Sprintf("word%03d", i))
	}
	paras := []string{strings.Join(words[:150], " "), strings.Join(words[150:300], " "), strings.Join(words[300:], " ") + " END."}
	desc := paras[0] + "\r\n\r\n" + paras[1] + "\n\n\n" + paras[2] + "\n"
	boards := testBoards()
	boards[0].Jobs[0].Listing.Description = desc
	v := newTestBrowse(t, "http://a")
	v.u.deps.Board = func(context.Context) ([]agent.PoolBoard, error) { return boards, nil }
	w := test.NewTempWindow(t, v.content)
	w.Resize(fyne.NewSize(1000, 640))
	v.load()
	v.settle()

	cell := v.cell(0, 0)
	name, short, _ := strings.Cut(cell, "\n")
	if name != "squares" || !strings.HasSuffix(short, "…") || utf8.RuneCountInString(short) > cellDescriptionRunes+1 {
		t.Errorf("the job's cell reads %q, want its name over the description's start ended with …", cell)
	}
	if last := strings.Fields(strings.TrimSuffix(short, "…")); !slices.Contains(words, last[len(last)-1]) {
		t.Errorf("the cell cuts a word: %q", short)
	}

	v.table.Select(widget.TableCellID{Row: 0, Col: 0})
	w.Content().Refresh()
	want := strings.Join(paras, "\n\n")
	if !strings.Contains(v.details.Text, "squares\n"+want+"\n") {
		t.Errorf("the details do not show the whole description with its paragraphs:\n%s", v.details.Text)
	}
	if !fitsWhole(v.details) {
		t.Errorf("the details are drawn %v, need height %.0f", v.details.Size(), v.details.MinSize().Height)
	}
	v.scroll.ScrollToBottom()
	if d := fyne.CurrentApp().Driver(); d.AbsolutePositionForObject(v.details).Y+v.details.Size().Height >
		d.AbsolutePositionForObject(v.scroll).Y+v.scroll.Size().Height+0.5 {
		t.Error("scrolled to its end, the details pane does not show the details' end")
	}

	// A description past maxDescriptionRunes says how much is left out.
	long := strings.Repeat("x ", maxDescriptionRunes)
	if got := wholeDescription(long); !strings.HasSuffix(got, fmt.Sprintf("… (%d more characters not shown)", 2*maxDescriptionRunes-1-maxDescriptionRunes)) {
		t.Errorf("a description of %d characters ends %q", len(long), got[len(got)-60:])
	}
}
