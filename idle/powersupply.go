package idle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// sysfsPower is a PowerSource over Linux's power-supply class
// (Documentation/ABI/testing/sysfs-class-power): one directory per supply
// under root ("/sys/class/power_supply"), each with a "type" file.
//
//   - type Battery is an internal (system) battery unless it is a
//     peripheral's (isPeripheralBattery: a mouse, a headset, a gamepad, or
//     a USB UPS that the kernel's HID driver exposes) or reports
//     present=0 (an empty battery bay). An internal battery sets
//     HasBattery and gives Percent from capacity (or energy_now/energy_full,
//     charge_now/charge_full), averaged over all internal batteries.
//   - type UPS is a UPS: it never makes the machine "on battery".
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
			if isPeripheralBattery(root, dir, func(name string) string { return read(dir, name) }) {
				continue // a mouse, a headset, a gamepad or a USB UPS
			}
			if read(dir, "present") == "0" {
				continue // an empty bay
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

// isPeripheralBattery tells a peripheral's battery from the machine's own,
// following upower (src/linux/up-device-supply.c and up-enumerator-udev.c:
// device batteries of HID, USB and Bluetooth peripherals are not power
// supplies of the system), in this order:
//
//  1. the supply's scope file, where the driver sets it: "Device" is a
//     peripheral's, "System" the machine's;
//  2. without a scope, where the supply hangs in the device tree (its
//     "device" link, resolved): under a USB bus (usbN), Bluetooth (hciN,
//     bluetooth), user-space HID (uhid, which BlueZ uses) or a HID device
//     (a "BBBB:VVVV:PPPP.NNNN" node) it is a peripheral's; under ACPI
//     (PNP0C0A), a platform device or a bus on the board it is the
//     machine's;
//  3. without either, its name: the drivers of peripherals name their
//     supplies "hid-…-battery", "hidpp_battery_N", "wacom_battery_N",
//     "sony_controller_battery_…", "ps-controller-battery-…",
//     "nintendo_switch_controller_battery_…"; any other name (BAT0, CMB0,
//     a virtual machine's battery) is the machine's.
func isPeripheralBattery(root, dir string, read func(string) string) bool {
	switch scope := read("scope"); {
	case strings.EqualFold(scope, "Device"):
		return true
	case strings.EqualFold(scope, "System"):
		return false
	}
	if dev, err := filepath.EvalSymlinks(filepath.Join(root, dir, "device")); err == nil {
		parts := strings.Split(filepath.ToSlash(dev), "/")
		if i := slices.Index(parts, "devices"); i >= 0 {
			parts = parts[i+1:] // the device tree, not where sysfs is mounted
		}
		for _, part := range parts {
			if peripheralNode(part) {
				return true
			}
		}
		return false
	}
	name := strings.ToLower(dir)
	for _, p := range []string{"hid-", "hidpp_battery", "wacom_battery", "controller_battery", "controller-battery"} {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// peripheralNode reports whether a node of a sysfs device path is a bus or
// device that only peripherals hang under: a USB bus ("usb1"), Bluetooth
// ("hci0", "bluetooth"), user-space HID ("uhid") or a HID device
// ("0003:046D:C52B.0001": bus, vendor, product, instance).
func peripheralNode(part string) bool {
	switch {
	case part == "bluetooth" || part == "uhid":
		return true
	case strings.HasPrefix(part, "usb") && isDigits(part[3:]):
		return true
	case strings.HasPrefix(part, "hci") && isDigits(part[3:]):
		return true
	}
	return isHIDNode(part)
}

// isHIDNode reports whether part names a HID device: four hex digits
// (the bus), ':', four (vendor), ':', four (product), '.', four (instance).
func isHIDNode(part string) bool {
	if len(part) != 19 || part[4] != ':' || part[9] != ':' || part[14] != '.' {
		return false
	}
	for i, c := range part {
		if i == 4 || i == 9 || i == 14 {
			continue
		}
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
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
