package idle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GameSign names one way of telling, without a list of programs, that a
// game runs: each is a signal of its own, switched on or off in Settings.
type GameSign string

// The signs of a game running.
const (
	// GameFullScreen: the active window fills the screen. On Linux the
	// window manager's _NET_ACTIVE_WINDOW has _NET_WM_STATE_FULLSCREEN
	// (EWMH); on Windows SHQueryUserNotificationState says a full-screen
	// Direct3D program, a full-screen program or presentation mode.
	GameFullScreen GameSign = "fullscreen"
	// GameGameMode: Feral Interactive's GameMode daemon (gamemoded) has
	// registered clients (its D-Bus property ClientCount is above 0).
	GameGameMode GameSign = "gamemode"
	// GameSteam: the Steam client says it runs a game (RunningAppID is
	// not 0).
	GameSteam GameSign = "steam"
)

// GameSigns lists every sign, in the order Settings and status show them.
var GameSigns = []GameSign{GameFullScreen, GameGameMode, GameSteam}

// Game is one sign that a game runs, with what it saw in words for people:
// a noun phrase such as "a full-screen game", "a game using GameMode" or
// "a Steam game (app 570)", so that the policy can say "paused: a
// full-screen game is running".
type Game struct {
	Sign GameSign `json:"sign"`
	What string   `json:"what"`
}

// GameSource tells whether a game runs now, by one sign.
//
// Game returns what it sees as a noun phrase for people (see Game.What),
// or "" when it sees no game. It returns an error wrapping ErrNoSource
// when the sign cannot exist here (no X display or window manager,
// GameMode not running, Steam not installed): the Sampler counts that as
// "no game", with the error as the reading's source. Other errors (a hung
// X server, a broken bus) make the reading unknown. errors.ErrUnsupported
// where the platform has no such sign. It must return soon after ctx is
// done. Safe for concurrent use.
type GameSource interface {
	Game(ctx context.Context) (string, error)
}

// gameProbe wraps a GameSource for the Sampler: a sign that cannot exist
// here answers "no game", known, with the reason as its source.
func gameProbe(src GameSource) func(ctx context.Context) (string, string, error) {
	return func(ctx context.Context) (string, string, error) {
		what, err := src.Game(ctx)
		switch {
		case errors.Is(err, ErrNoSource), errors.Is(err, errors.ErrUnsupported):
			return "", strings.TrimSuffix(err.Error(), ": "+ErrNoSource.Error()), nil
		case err != nil:
			return "", "", err
		}
		return what, "", nil
	}
}

// combineGames turns the readings of the signs asked (in GameSigns order)
// into Signals.Games: the games seen by the signs that answered; unknown,
// with the failures' reasons, when any sign failed.
func combineGames(signs []GameSign, rs []Reading[string]) Reading[[]Game] {
	out := Reading[[]Game]{Value: []Game{}, Known: true}
	var srcs, errs []string
	for i, r := range rs {
		if !r.Known {
			out.Known = false
			errs = append(errs, r.Err)
			continue
		}
		if r.Value != "" {
			out.Value = append(out.Value, Game{Sign: signs[i], What: r.Value})
		}
		switch prefix := string(signs[i]) + ": "; {
		case r.Source == "":
		case strings.HasPrefix(r.Source, prefix): // a source's own reason names it
			srcs = append(srcs, r.Source)
		default:
			srcs = append(srcs, prefix+r.Source)
		}
	}
	out.Source = strings.Join(srcs, "; ")
	if len(signs) == 0 {
		out.Source = "no game signs asked"
	}
	out.Err = strings.Join(errs, "; ")
	return out
}

// Signs returns the game signs the settings switch on, in GameSigns
// order: what a Sampler should ask (SamplerConfig.GameSigns).
func (s Settings) Signs() []GameSign {
	var out []GameSign
	for _, g := range GameSigns {
		if s.pausesFor(g) {
			out = append(out, g)
		}
	}
	return out
}

// pausesFor reports whether the settings switch sign on.
func (s Settings) pausesFor(sign GameSign) bool {
	switch sign {
	case GameFullScreen:
		return s.PauseForFullScreen
	case GameGameMode:
		return s.PauseForGameMode
	case GameSteam:
		return s.PauseForSteam
	}
	return false
}

// gamesFor keeps the games of the signs the settings switch on.
func gamesFor(s Settings, games []Game) []Game {
	return slices.DeleteFunc(slices.Clone(games), func(g Game) bool { return !s.pausesFor(g.Sign) })
}

// gameModeWhat names GameMode's registered clients: "" for none, "a game
// using GameMode", "3 games using GameMode".
func gameModeWhat(clients int) string {
	switch {
	case clients <= 0:
		return ""
	case clients == 1:
		return "a game using GameMode"
	}
	return fmt.Sprintf("%d games using GameMode", clients)
}

// steamWhat names the game Steam runs: "" for app 0 (none), "a Steam
// game (app 570)" otherwise.
func steamWhat(appID uint64) string {
	if appID == 0 {
		return ""
	}
	return fmt.Sprintf("a Steam game (app %d)", appID)
}

// The states SHQueryUserNotificationState reports
// (QUERY_USER_NOTIFICATION_STATE, shellapi.h).
const (
	qunsNotPresent           = 1 // screen saver, locked, or another user's session in front
	qunsBusy                 = 2 // a full-screen program (not Direct3D) or presentation settings
	qunsRunningD3DFullScreen = 3 // a full-screen Direct3D program: most games
	qunsPresentationMode     = 4 // the owner turned presentation mode on
	qunsAcceptsNotifications = 5
	qunsQuietTime            = 6 // the first hour after a new user's first log-on
	qunsApp                  = 7 // a Windows Store app in full screen
)

// notificationStateWhat turns SHQueryUserNotificationState's answer into
// the GameFullScreen sign: a full-screen Direct3D program (a game), a
// full-screen program, a full-screen Store app and presentation mode
// pause; the rest do not.
func notificationStateWhat(state uint32) string {
	switch state {
	case qunsRunningD3DFullScreen:
		return "a full-screen game"
	case qunsBusy:
		return "a full-screen program"
	case qunsApp:
		return "a full-screen app"
	case qunsPresentationMode:
		return "presentation mode"
	}
	return ""
}

// steamRegistry is what idlepool reads of Steam's registry: the game it
// runs (RunningAppID, 0 for none) and the Steam client's process ID
// (ActiveProcess/pid, 0 when Steam is not running).
type steamRegistry struct {
	RunningAppID uint64
	PID          int
}

// parseSteamRegistry reads registry.vdf, the text KeyValues file
// ("key" "value" pairs and "key" { ... } blocks) where the Steam client
// on Linux keeps what it keeps in the Windows registry on Windows:
// Registry/HKCU/Software/Valve/Steam/RunningAppID and
// .../Steam/ActiveProcess/pid. Keys compare without case, as Steam writes
// them in either. It returns an error for a file that is not KeyValues
// text.
func parseSteamRegistry(b []byte) (steamRegistry, error) {
	var reg steamRegistry
	var path []string
	toks, err := vdfTokens(b)
	if err != nil {
		return reg, err
	}
	for i := 0; i < len(toks); i++ {
		switch t := toks[i]; {
		case t == "}":
			if len(path) == 0 {
				return reg, errors.New("registry.vdf: unbalanced }")
			}
			path = path[:len(path)-1]
		case t == "{":
			return reg, errors.New("registry.vdf: { without a key")
		case i+1 < len(toks) && toks[i+1] == "{":
			path = append(path, strings.ToLower(t))
			i++
		case i+1 < len(toks) && toks[i+1] != "}":
			key, val := strings.ToLower(t), toks[i+1]
			i++
			where := strings.Join(path, "/")
			switch {
			case strings.HasSuffix(where, "software/valve/steam") && key == "runningappid":
				reg.RunningAppID, _ = strconv.ParseUint(val, 10, 64)
			case strings.HasSuffix(where, "software/valve/steam/activeprocess") && key == "pid":
				reg.PID, _ = strconv.Atoi(val)
			}
		default:
			return reg, fmt.Errorf("registry.vdf: key %q without a value", t)
		}
	}
	if len(path) > 0 {
		return reg, fmt.Errorf("registry.vdf: %q not closed", path[len(path)-1])
	}
	return reg, nil
}

// vdfTokens splits KeyValues text into quoted strings (with \" and \\
// escapes), unquoted words, and braces; // comments are skipped.
func vdfTokens(b []byte) ([]string, error) {
	var toks []string
	s := string(b)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '{' || c == '}':
			toks = append(toks, string(c))
			i++
		case c == '/' && strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"':
			var tok strings.Builder
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				tok.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("registry.vdf: unterminated string")
			}
			i++
			toks = append(toks, tok.String())
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\r\n{}\"", rune(s[j])) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		}
	}
	return toks, nil
}
