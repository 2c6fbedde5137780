//go:build windows

package idle

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/registry"
)

var (
	shell32                          = windows.NewLazySystemDLL("shell32.dll")
	procSHQueryUserNotificationState = shell32.NewProc("SHQueryUserNotificationState")
)

// notificationState is the GameFullScreen sign on Windows: shell32's
// SHQueryUserNotificationState (Windows Vista and later), which the shell
// asks before it shows a notification: a full-screen Direct3D program
// (QUNS_RUNNING_D3D_FULL_SCREEN, most games), a full-screen program
// (QUNS_BUSY), a full-screen Store app (QUNS_APP) or presentation mode
// (QUNS_PRESENTATION_MODE) pause; see notificationStateWhat. It must run
// in the user's session (the tray app, or an agent it started). One call
// is a few microseconds.
type notificationState struct{}

var _ GameSource = notificationState{}

// Game implements GameSource.
func (notificationState) Game(context.Context) (string, error) {
	if err := procSHQueryUserNotificationState.Find(); err != nil {
		return "", fmt.Errorf("SHQueryUserNotificationState: %w: %w", err, ErrNoSource)
	}
	var state uint32
	hr, _, _ := procSHQueryUserNotificationState.Call(uintptr(unsafe.Pointer(&state)))
	if int32(hr) < 0 {
		return "", fmt.Errorf("SHQueryUserNotificationState: HRESULT %#x", uint32(hr))
	}
	return notificationStateWhat(state), nil
}

// steamRegKey is the GameSteam sign on Windows: the Steam client's
// HKEY_CURRENT_USER\Software\Valve\Steam, whose RunningAppID (DWORD) is
// the game it runs (0: none) and ActiveProcess\pid the client's process
// ID, 0 once it has exited. A game counts while both are set. Two
// registry reads a call.
type steamRegKey struct{}

var _ GameSource = steamRegKey{}

// Game implements GameSource.
func (steamRegKey) Game(context.Context) (string, error) {
	k, err := registry.OpenKey(registry.CURRENT_USER, `Software\Valve\Steam`, registry.QUERY_VALUE)
	if errors.Is(err, registry.ErrNotExist) {
		return "", fmt.Errorf("steam: not installed: %w", ErrNoSource)
	} else if err != nil {
		return "", fmt.Errorf("steam: open its registry key: %w", err)
	}
	defer k.Close()
	app, _, err := k.GetIntegerValue("RunningAppID")
	if errors.Is(err, registry.ErrNotExist) || app == 0 {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("steam: RunningAppID: %w", err)
	}
	p, err := registry.OpenKey(registry.CURRENT_USER, `Software\Valve\Steam\ActiveProcess`, registry.QUERY_VALUE)
	if err != nil {
		return "", nil // Steam is not running: RunningAppID is left over
	}
	defer p.Close()
	if pid, _, err := p.GetIntegerValue("pid"); err != nil || pid == 0 {
		return "", nil
	}
	return steamWhat(app), nil
}
