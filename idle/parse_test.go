package idle

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shirou/gopsutil/v4/sensors"
)

func TestReadPowerSupply(t *testing.T) {
	tests := []struct {
		fixture string
		want    Power
	}{
		{"desktop", Power{}},
		{"laptop-charging", Power{HasBattery: true, Percent: 80}},
		{"laptop-discharging", Power{OnBattery: true, HasBattery: true, Percent: 43}},
		{"laptop-usbc", Power{HasBattery: true, Percent: 80}}, // (60+100)/2; the USB-C charger is online
		{"ups-usb", Power{}},
		{"mouse", Power{}},
		// Peripherals' batteries without a scope file, told apart by where
		// they hang in the device tree (USB, Bluetooth through uhid) or by
		// their driver's name; a laptop's ACPI battery without one is the
		// machine's.
		{"headset-usb", Power{}},
		{"gamepad-bluetooth", Power{}},
		{"keyboard-bluetooth", Power{}},
		{"laptop-acpi", Power{OnBattery: true, HasBattery: true, Percent: 55}},
		// An empty second bay (present 0) is no battery: not averaged in.
		{"laptop-empty-bay", Power{HasBattery: true, Percent: 80}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			got, err := readPowerSupply(filepath.Join("testdata", "power_supply", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("power (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		if _, err := readPowerSupply(filepath.Join(t.TempDir(), "none")); err == nil {
			t.Error("no error for a missing directory: a machine without /sys is unknown, not on AC")
		}
	})
}

func TestParsePmset(t *testing.T) {
	tests := []struct {
		fixture string
		want    Power
	}{
		{"macbook-battery.txt", Power{OnBattery: true, HasBattery: true, Percent: 43}},
		{"macbook-ac.txt", Power{HasBattery: true, Percent: 100}},
		{"macmini.txt", Power{}},
		{"macmini-ups.txt", Power{}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "pmset", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parsePmset(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("power (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parsePmset("pmset: command not found\n"); err == nil {
		t.Error("no error for output without a power source")
	}
}

func TestParseIoregIdle(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "ioreg", "macbook.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseIoregIdle(string(b))
	if want := 64300125 * time.Microsecond; err != nil || got != want {
		t.Errorf("parseIoregIdle = %v, %v; want %v", got, err, want)
	}
	b, err = os.ReadFile(filepath.Join("testdata", "ioreg", "no-hid.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseIoregIdle(string(b)); err == nil {
		t.Error("no error without HIDIdleTime")
	}
}

func TestPowerFromWindowsStatus(t *testing.T) {
	tests := []struct {
		name              string
		ac, flag, percent byte
		want              Power
		wantErr           bool
	}{
		{name: "desktop", ac: 1, flag: 128, percent: 255, want: Power{}},
		{name: "laptop on AC", ac: 1, flag: 8, percent: 80, want: Power{HasBattery: true, Percent: 80}},
		{name: "laptop on battery", ac: 0, flag: 1, percent: 43, want: Power{OnBattery: true, HasBattery: true, Percent: 43}},
		{name: "low battery", ac: 0, flag: 2 | 4, percent: 3, want: Power{OnBattery: true, HasBattery: true, Percent: 3}},
		{name: "unknown AC with battery", ac: 255, flag: 1, percent: 50, wantErr: true},
		{name: "all unknown", ac: 255, flag: 255, percent: 255, want: Power{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := powerFromWindowsStatus(tc.ac, tc.flag, tc.percent)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("power (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatchPrograms(t *testing.T) {
	running := []string{
		"systemd", "bash", "/usr/bin/steam", `C:\Games\Witcher3\witcher3.exe`,
		"Factorio.exe", "ThisIsALongGame", // a 15-character comm, truncated by Linux
	}
	tests := []struct {
		name string
		want []string
		out  []string
	}{
		{name: "none listed", want: nil, out: []string{}},
		{name: "case and .exe", want: []string{"STEAM.EXE", "factorio"}, out: []string{"STEAM.EXE", "factorio"}},
		{name: "with a directory", want: []string{`D:\other\Witcher3.exe`}, out: []string{`D:\other\Witcher3.exe`}},
		{name: "not running", want: []string{"game.exe", "bash.sh"}, out: []string{}},
		{name: "truncated comm", want: []string{"ThisIsALongGameWithAName"}, out: []string{"ThisIsALongGameWithAName"}},
		{name: "short name is not a prefix match", want: []string{"stea", "bashful"}, out: []string{}},
		{name: "once each, in order", want: []string{"bash", "Bash.exe", "steam"}, out: []string{"bash", "steam"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.out, MatchPrograms(tc.want, running)); diff != "" {
				t.Errorf("MatchPrograms (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMaxCPUTemperature(t *testing.T) {
	tests := []struct {
		name    string
		stats   []sensors.TemperatureStat
		want    float64
		sensor  string
		wantErr bool
	}{
		{
			name: "intel",
			stats: []sensors.TemperatureStat{
				{SensorKey: "coretemp_package_id_0", Temperature: 64},
				{SensorKey: "coretemp_core_0", Temperature: 67},
				{SensorKey: "nvme_composite", Temperature: 80},
				{SensorKey: "iwlwifi_1", Temperature: 90},
			},
			want: 67, sensor: "coretemp_core_0",
		},
		{
			name:  "amd and acpi",
			stats: []sensors.TemperatureStat{{SensorKey: "k10temp_tctl", Temperature: 71.5}, {SensorKey: "acpitz", Temperature: 27.8}},
			want:  71.5, sensor: "k10temp_tctl",
		},
		{
			name:  "faulty sensor ignored",
			stats: []sensors.TemperatureStat{{SensorKey: "coretemp_core_1", Temperature: 255}, {SensorKey: "acpitz", Temperature: 40}},
			want:  40, sensor: "acpitz",
		},
		{name: "only disks", stats: []sensors.TemperatureStat{{SensorKey: "drivetemp", Temperature: 35}}, wantErr: true},
		{name: "none", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, sensor, err := maxCPUTemperature(tc.stats)
			if (err != nil) != tc.wantErr || got != tc.want || sensor != tc.sensor {
				t.Errorf("maxCPUTemperature = %v, %q, %v; want %v, %q, error %v", got, sensor, err, tc.want, tc.sensor, tc.wantErr)
			}
		})
	}
}

func TestProcessListSeesThisProcess(t *testing.T) {
	names, err := processList{}.ProgramNames(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Base(os.Args[0]) // "idle.test", or "idle.test.exe" on Windows
	if got := MatchPrograms([]string{"/somewhere/" + self}, names); len(got) != 1 {
		t.Errorf("this test binary %q not among %d running programs", self, len(names))
	}
}
