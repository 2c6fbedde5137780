//go:build windows

package idle

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// DefaultSources returns Windows's sources: input idle time from
// GetLastInputInfo, CPU load and programs from gopsutil, power from
// GetSystemPowerStatus, temperatures from gopsutil (WMI thermal zones,
// usually readable by administrators only), games from
// SHQueryUserNotificationState (full screen) and Steam's registry key. GPU
// is left nil for the caller to fill from package worker. GameMode is
// Linux's alone. GetLastInputInfo sees the input of the session the
// program runs in only, so o changes nothing.
func DefaultSources(o SourceOptions) Sources {
	return Sources{
		InputIdle: []InputIdleSource{lastInputIdle{}},
		Load:      psLoad{},
		Power:     winPower{},
		Thermal:   sensorThermal{},
		Processes: processList{},
		Games: map[GameSign]GameSource{
			GameFullScreen: notificationState{},
			GameSteam:      steamRegKey{},
		},
	}
}

// The procedures are loaded on first use (windows.NewLazySystemDLL loads
// only from the system directory), so merely importing the package loads
// nothing.
var (
	user32                   = windows.NewLazySystemDLL("user32.dll")
	kernel32                 = windows.NewLazySystemDLL("kernel32.dll")
	procGetLastInputInfo     = user32.NewProc("GetLastInputInfo")
	procGetTickCount64       = kernel32.NewProc("GetTickCount64")
	procGetSystemPowerStatus = kernel32.NewProc("GetSystemPowerStatus")
)

// lastInputInfo is LASTINPUTINFO (winuser.h).
type lastInputInfo struct {
	cbSize uint32
	dwTime uint32 // GetTickCount value at the last input event
}

// lastInputIdle is an InputIdleSource over user32's GetLastInputInfo: the
// tick count of the last keyboard or mouse input of the calling process's
// session, local console or Remote Desktop alike. It must run in the user's
// session (the tray app, or an agent it started): a service in session 0
// sees no input. The idle time is GetTickCount64 less dwTime, computed in
// 32 bits so that the 49.7-day wrap of dwTime is harmless.
type lastInputIdle struct{}

var _ InputIdleSource = lastInputIdle{}

// IdleTime implements InputIdleSource.
func (lastInputIdle) IdleTime(context.Context) (time.Duration, string, error) {
	if err := procGetLastInputInfo.Find(); err != nil {
		return 0, "", fmt.Errorf("GetLastInputInfo: %w", err)
	}
	if err := procGetTickCount64.Find(); err != nil {
		return 0, "", fmt.Errorf("GetTickCount64: %w", err)
	}
	info := lastInputInfo{cbSize: uint32(unsafe.Sizeof(lastInputInfo{}))}
	if r, _, err := procGetLastInputInfo.Call(uintptr(unsafe.Pointer(&info))); r == 0 {
		return 0, "", fmt.Errorf("GetLastInputInfo: %w", err)
	}
	now, _, _ := procGetTickCount64.Call()
	ms := uint32(now) - info.dwTime
	return time.Duration(ms) * time.Millisecond, "GetLastInputInfo", nil
}

// systemPowerStatus is SYSTEM_POWER_STATUS (winbase.h).
type systemPowerStatus struct {
	ACLineStatus        byte
	BatteryFlag         byte
	BatteryLifePercent  byte
	SystemStatusFlag    byte
	BatteryLifeTime     uint32
	BatteryFullLifeTime uint32
}

// winPower is a PowerSource over kernel32's GetSystemPowerStatus, decoded
// by powerFromWindowsStatus.
type winPower struct{}

var _ PowerSource = winPower{}

// Power implements PowerSource.
func (winPower) Power(context.Context) (Power, error) {
	if err := procGetSystemPowerStatus.Find(); err != nil {
		return Power{}, fmt.Errorf("GetSystemPowerStatus: %w", err)
	}
	var st systemPowerStatus
	if r, _, err := procGetSystemPowerStatus.Call(uintptr(unsafe.Pointer(&st))); r == 0 {
		return Power{}, fmt.Errorf("GetSystemPowerStatus: %w", err)
	}
	return powerFromWindowsStatus(st.ACLineStatus, st.BatteryFlag, st.BatteryLifePercent)
}
