package idle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func withGames(games ...Game) func(*Signals) {
	return func(s *Signals) { s.Games = Reading[[]Game]{Value: games, Known: true} }
}

var (
	fullScreenGame = Game{Sign: GameFullScreen, What: "a full-screen game"}
	gameModeGame   = Game{Sign: GameGameMode, What: "a game using GameMode"}
	steamGame      = Game{Sign: GameSteam, What: "a Steam game (app 570)"}
)

// TestDecideGames: each sign pauses with its reason in words, named with
// the listed programs; a sign switched off does not; after the game ends
// computing waits the idle time; a sign that stops answering holds the
// last game for GameHold only.
func TestDecideGames(t *testing.T) {
	wall := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	unknown := func(s *Signals) {
		s.Games = Reading[[]Game]{Value: []Game{}, Err: "game sign fullscreen: idle: probe timed out after 500ms"}
	}
	tests := []struct {
		name     string
		settings Settings
		steps    []step
	}{
		{"a full-screen window pauses, and computing waits the idle time after it closes", Defaults(), []step{
			{wall, 0, withGames(fullScreenGame), paused("paused: a full-screen game is running")},
			{wall, time.Minute, withGames(fullScreenGame), paused("paused: a full-screen game is running")},
			{wall, time.Minute + time.Second, withGames(), waiting("waiting: a game ran 1 s ago; starting after 5 min idle")},
			{wall, 6*time.Minute - time.Second, withGames(), waiting("waiting: a game ran 4 min 59 s ago; starting after 5 min idle")},
			{wall, 6 * time.Minute, withGames(), computing(7, "computing on 7 of 8 cores")},
		}},
		{"GameMode and Steam pause, named together with a listed program", withSettings(func(s *Settings) { s.PauseFor = []string{"factorio"} }), []step{
			{wall, 0, func(s *Signals) {
				withGames(gameModeGame, steamGame)(s)
				s.Running.Value = []string{"factorio"}
			}, paused("paused: factorio, a game using GameMode and a Steam game (app 570) are running")},
			{wall, time.Second, withGames(steamGame), paused("paused: a Steam game (app 570) is running")},
		}},
		{"a sign switched off does not pause", withSettings(func(s *Settings) { s.PauseForFullScreen = false }), []step{
			{wall, 0, withGames(fullScreenGame), computing(7, "computing on 7 of 8 cores")},
			{wall, time.Second, withGames(fullScreenGame, steamGame), paused("paused: a Steam game (app 570) is running")},
		}},
		{"no wait after a game when idle time is not required", withSettings(func(s *Settings) { s.IdleFor = 0 }), []step{
			{wall, 0, withGames(gameModeGame), paused("paused: a game using GameMode is running")},
			{wall, time.Second, withGames(), computing(7, "computing on 7 of 8 cores; input idle time not required (idle_for 0)")},
		}},
		{"an unknown reading holds the last game for GameHold", Defaults(), []step{
			{wall, 0, withGames(fullScreenGame), paused("paused: a full-screen game is running")},
			{wall, GameHold - time.Second, unknown, paused("paused: a full-screen game is running (last seen; cannot tell now)")},
			{wall, GameHold, unknown, waiting("waiting: a game ran 30 s ago; starting after 5 min idle")},
			{wall, GameHold + DefaultIdleFor, unknown, computing(7, "computing on 7 of 8 cores; cannot tell whether a game runs (game sign fullscreen: idle: probe timed out after 500ms)")},
		}},
		{"games do not override the owner's pause", withSettings(func(s *Settings) { s.PausedUntil = wall.Add(time.Hour) }), []step{
			{wall, 0, withGames(fullScreenGame), paused("paused by you until Wed 00:00")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st PolicyState
			for i, s := range tc.steps {
				sig := idleDesktop(s.wall)
				if s.sig != nil {
					s.sig(&sig)
				}
				var got Decision
				got, st = Decide(tc.settings, sig, s.wall, s.mono, st)
				if diff := cmp.Diff(s.want, got, ignoreCause); diff != "" {
					t.Errorf("step %d (mono %s): decision (-want +got):\n%s", i, s.mono, diff)
				}
			}
		})
	}
}

// fakeGame is a GameSource that answers what it is told, counting calls.
type fakeGame struct {
	what  atomic.Value // string
	err   error
	calls atomic.Int64
	block chan struct{} // non-nil: Game waits for it or ctx
}

func (f *fakeGame) Game(ctx context.Context) (string, error) {
	f.calls.Add(1)
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	w, _ := f.what.Load().(string)
	return w, f.err
}

// TestSamplerGames: the signs asked are asked, the others not; a sign
// that cannot exist here sees no game, known; one that fails makes the
// reading unknown but keeps what the others saw.
func TestSamplerGames(t *testing.T) {
	full, mode, steam := &fakeGame{}, &fakeGame{}, &fakeGame{}
	full.what.Store("a full-screen game")
	mode.err = fmt.Errorf("gamemode: not running: %w", ErrNoSource)
	steam.what.Store("a Steam game (app 10)")
	srcs := Sources{Games: map[GameSign]GameSource{GameFullScreen: full, GameGameMode: mode, GameSteam: steam}}

	s := NewSampler(SamplerConfig{Sources: srcs, GameSigns: []GameSign{GameFullScreen, GameGameMode}, ProbeTimeout: 2 * time.Second})
	got := s.Sample(t.Context()).Games
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want := Reading[[]Game]{Value: []Game{{GameFullScreen, "a full-screen game"}}, Known: true,
		Source: "gamemode: not running"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("games (-want +got):\n%s", diff)
	}
	// A reason that does not name its sign is named by it.
	absent := &fakeGame{err: fmt.Errorf("no registry.vdf: %w", ErrNoSource)}
	s = NewSampler(SamplerConfig{Sources: Sources{Games: map[GameSign]GameSource{GameSteam: absent}},
		GameSigns: []GameSign{GameSteam}, ProbeTimeout: 2 * time.Second})
	got = s.Sample(t.Context()).Games
	_ = s.Close()
	if !got.Known || got.Source != "steam: no registry.vdf" {
		t.Errorf("Steam absent: %+v, want known, source %q", got, "steam: no registry.vdf")
	}
	if n := steam.calls.Load(); n != 0 {
		t.Errorf("Steam, switched off, asked %d times", n)
	}

	broken := &fakeGame{err: errors.New("x11: connection reset")}
	s = NewSampler(SamplerConfig{Sources: Sources{Games: map[GameSign]GameSource{GameFullScreen: broken, GameSteam: steam}},
		GameSigns: []GameSign{GameFullScreen, GameSteam}, ProbeTimeout: 2 * time.Second})
	got = s.Sample(t.Context()).Games
	_ = s.Close()
	if got.Known || got.Err != "x11: connection reset" || len(got.Value) != 1 || got.Value[0].Sign != GameSteam {
		t.Errorf("one sign failing: %+v, want unknown with Steam's game and the failure", got)
	}

	s = NewSampler(SamplerConfig{Sources: srcs})
	got = s.Sample(t.Context()).Games
	_ = s.Close()
	if !got.Known || len(got.Value) != 0 || full.calls.Load() != 1 {
		t.Errorf("no signs asked: %+v after %d full-screen calls, want known, empty, not asked", got, full.calls.Load())
	}
}

func TestSettingsGameSigns(t *testing.T) {
	s := Defaults()
	if diff := cmp.Diff([]GameSign{GameFullScreen, GameGameMode, GameSteam}, s.Signs()); diff != "" {
		t.Errorf("default signs (-want +got):\n%s", diff)
	}
	now := time.Now()
	if err := s.Set("pause_for_steam", "off", now); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]GameSign{GameFullScreen, GameGameMode}, s.Signs()); diff != "" {
		t.Errorf("signs without Steam (-want +got):\n%s", diff)
	}
	if err := s.Set("pause_for_games", "false", now); err != nil || len(s.Signs()) != 0 {
		t.Errorf("pause_for_games=false: %v, signs %v", err, s.Signs())
	}
	if err := s.Set("pause_for_fullscreen", "maybe", now); err == nil || !strings.Contains(err.Error(), "want true or false") {
		t.Errorf("pause_for_fullscreen=maybe: %v", err)
	}
	// A document stored before the switches existed keeps them on.
	old := Defaults()
	if err := json.Unmarshal([]byte(`{"idle_for":"10m0s","pause_for":["game.exe"]}`), &old); err != nil {
		t.Fatal(err)
	}
	if !old.PauseForFullScreen || !old.PauseForGameMode || !old.PauseForSteam {
		t.Errorf("an older document turned game signs off: %+v", old)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	back := Defaults()
	if err := json.Unmarshal(b, &back); err != nil || len(back.Signs()) != 0 {
		t.Errorf("switches off do not survive JSON: %s -> %v, %v", b, back.Signs(), err)
	}
}

func TestGameWords(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{gameModeWhat(0), ""},
		{gameModeWhat(1), "a game using GameMode"},
		{gameModeWhat(3), "3 games using GameMode"},
		{steamWhat(0), ""},
		{steamWhat(570), "a Steam game (app 570)"},
		{notificationStateWhat(qunsRunningD3DFullScreen), "a full-screen game"},
		{notificationStateWhat(qunsBusy), "a full-screen program"},
		{notificationStateWhat(qunsPresentationMode), "presentation mode"},
		{notificationStateWhat(qunsApp), "a full-screen app"},
		{notificationStateWhat(qunsAcceptsNotifications), ""},
		{notificationStateWhat(qunsNotPresent), ""}, // locked or screen saver: the owner is away
		{notificationStateWhat(qunsQuietTime), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestParseSteamRegistry(t *testing.T) {
	doc := `"Registry"
{
	"HKCU"
	{
		"Software"
		{
			"Valve"
			{
				"Steam"
				{
					"language"		"english"
					"RunningAppID"		"570"
					"SourceModInstallPath"		"/home/owner/.steam/steam/steamapps/sourcemods"
					"ActiveProcess"
					{
						"pid"		"4242"
						"SteamClientDll"		"/home/owner/.steam/steam/ubuntu12_32/steamclient.so"
					}
					"Apps"
					{
						"570"
						{
							"Running"		"1"
							"name"		"Dota \"2\""
						}
					}
				}
			}
		}
	}
}
`
	got, err := parseSteamRegistry([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if want := (steamRegistry{RunningAppID: 570, PID: 4242}); got != want {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	for _, bad := range []string{`"Registry" { "a" "b"`, `"Registry" { "a" } }`, `"a" "b" "c"`, `"Registry" { "unterminated }`} {
		if _, err := parseSteamRegistry([]byte(bad)); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}
