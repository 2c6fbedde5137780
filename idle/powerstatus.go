package idle

import "fmt"

// This file has no build constraint so that the decoding is tested on every
// platform; sources_windows.go calls GetSystemPowerStatus.

// powerFromWindowsStatus reads the fields of Windows's SYSTEM_POWER_STATUS
// (GetSystemPowerStatus): ACLineStatus 0 offline, 1 online, 255 unknown;
// BatteryFlag 128 no system battery, 255 unknown; BatteryLifePercent 0..100,
// 255 unknown. Unknown AC status with a battery is an error: the policy
// must not guess.
func powerFromWindowsStatus(acLine, batteryFlag, lifePercent byte) (Power, error) {
	if batteryFlag&128 != 0 && batteryFlag != 255 {
		return Power{}, nil // no system battery: a desktop, on AC
	}
	pw := Power{HasBattery: batteryFlag != 255 || lifePercent != 255}
	if lifePercent <= 100 {
		pw.Percent = float64(lifePercent)
	}
	switch acLine {
	case 0:
		pw.OnBattery = pw.HasBattery
	case 1:
	default:
		if pw.HasBattery {
			return Power{}, fmt.Errorf("GetSystemPowerStatus: AC line status unknown")
		}
	}
	return pw, nil
}
