package idle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sysfsPower is a PowerSource over Linux's power-supply class
// (Documentation/ABI/testing/sysfs-class-power): one directory per supply
// under root ("/sys/class/power_supply"), each with a "type" file.
//
//   - type Battery with scope System (or no scope) is an internal battery:
//     HasBattery, and Percent from capacity (or energy_now/energy_full,
//     charge_now/charge_full), averaged over all internal batteries.
//   - type Battery with scope Device is a peripheral's battery (a mouse, a
//     headset, or a USB UPS that the kernel's HID driver exposes), and type
//     UPS is a UPS: neither makes the machine "on battery".
//   - OnBattery when an internal battery reports status Discharging and no
//     Mains, USB or USB_* supply reports online=1.
//
// An empty directory is a desktop without a battery: on AC.
type sysfsPower struct {
	root string
}

var _ PowerSource = sysfsPower{}

// Power implements PowerSource.
func (p sysfsPower) Power(context.Context) (Power, error) {
	return readPowerSupply(p.root)
}

func readPowerSupply(root string) (Power, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return Power{}, fmt.Errorf("power: %w", err)
	}
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(root, dir, name))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	var (
		pw          Power
		discharging bool
		mainsOnline bool
		percents    []float64
	)
	for _, e := range entries {
		dir := e.Name()
		typ := read(dir, "type")
		switch {
		case typ == "Battery":
			if strings.EqualFold(read(dir, "scope"), "Device") {
				continue // a mouse, a headset or a USB UPS
			}
			pw.HasBattery = true
			if strings.EqualFold(read(dir, "status"), "Discharging") {
				discharging = true
			}
			if pct, ok := batteryPercent(func(name string) string { return read(dir, name) }); ok {
				percents = append(percents, pct)
			}
		case typ == "Mains" || typ == "USB" || strings.HasPrefix(typ, "USB_"):
			if read(dir, "online") == "1" {
				mainsOnline = true
			}
		}
	}
	if len(percents) > 0 {
		sum := 0.0
		for _, v := range percents {
			sum += v
		}
		pw.Percent = sum / float64(len(percents))
	}
	pw.OnBattery = pw.HasBattery && discharging && !mainsOnline
	return pw, nil
}

// batteryPercent reads a battery's charge: capacity (percent) where the
// driver gives it, else energy_now/energy_full or charge_now/charge_full.
func batteryPercent(read func(string) string) (float64, bool) {
	if v, err := strconv.ParseFloat(read("capacity"), 64); err == nil {
		return max(0, min(100, v)), true
	}
	for _, pair := range [][2]string{{"energy_now", "energy_full"}, {"charge_now", "charge_full"}} {
		now, err1 := strconv.ParseFloat(read(pair[0]), 64)
		full, err2 := strconv.ParseFloat(read(pair[1]), 64)
		if err1 == nil && err2 == nil && full > 0 {
			return max(0, min(100, 100*now/full)), true
		}
	}
	return 0, false
}
