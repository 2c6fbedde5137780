package idle

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewCapacity(t *testing.T) {
	m := Machine{OS: "linux", Arch: "amd64", CPUModel: "Ryzen", LogicalCPUs: 8, MemoryTotalMiB: 32768, TimeZone: "Europe/Berlin"}
	var sig Signals
	twoGPUs(&sig)
	tests := []struct {
		name string
		edit func(*Settings)
		gpus Reading[[]GPU]
		want Capacity
	}{
		{"defaults: all cores but one, half the memory, no GPU, any time", func(*Settings) {}, sig.GPUs, Capacity{
			OS: "linux", Arch: "amd64", CPUModel: "Ryzen", LogicalCPUs: 8, Cores: 7,
			MemoryTotalMiB: 32768, MemoryMiB: 16384, GPUs: []GPUOffer{}, Schedule: Schedule{}, TimeZone: "Europe/Berlin",
		}},
		{"half the CPU time of each core", func(s *Settings) { s.CPUTimeShare = 0.5 }, sig.GPUs, Capacity{
			OS: "linux", Arch: "amd64", CPUModel: "Ryzen", LogicalCPUs: 8, Cores: 7, CPUTimeShare: 0.5,
			MemoryTotalMiB: 32768, MemoryMiB: 16384, GPUs: []GPUOffer{}, Schedule: Schedule{}, TimeZone: "Europe/Berlin",
		}},
		{"a share of cores and memory, one GPU with its memory share, nights", func(s *Settings) {
			s.CoresShare, s.MemoryShare = 0.5, 0.25
			s.GPUs = map[string]GPUSettings{"GPU-bbb": {Use: true, MemoryShare: 0.75}, "GPU-aaa": {Use: false}, "GPU-gone": {Use: true}}
			s.Schedule = Schedule{{EveryDay, 22 * 60, 7 * 60}}
			s.TimeZone = "America/New_York"
		}, sig.GPUs, Capacity{
			OS: "linux", Arch: "amd64", CPUModel: "Ryzen", LogicalCPUs: 8, Cores: 4,
			MemoryTotalMiB: 32768, MemoryMiB: 8192,
			GPUs:     []GPUOffer{{UUID: "GPU-bbb", Name: "RTX 3060", ComputeCapability: "8.6", MemoryTotalMiB: 12000, MemoryMiB: 9000}},
			Schedule: Schedule{{EveryDay, 22 * 60, 7 * 60}}, TimeZone: "America/New_York",
		}},
		{"busy GPUs are still offered, at the default memory share", func(s *Settings) {
			s.GPUs = map[string]GPUSettings{"GPU-aaa": {Use: true}}
		}, sig.GPUs, Capacity{
			OS: "linux", Arch: "amd64", CPUModel: "Ryzen", LogicalCPUs: 8, Cores: 7,
			MemoryTotalMiB: 32768, MemoryMiB: 16384,
			GPUs:     []GPUOffer{{UUID: "GPU-aaa", Name: "RTX 4090", ComputeCapability: "8.9", MemoryTotalMiB: 24000, MemoryMiB: 12000}},
			Schedule: Schedule{}, TimeZone: "Europe/Berlin",
		}},
		{"no NVIDIA driver: no GPU", func(s *Settings) {
			s.GPUs = map[string]GPUSettings{"GPU-aaa": {Use: true}}
		}, Reading[[]GPU]{Err: "no NVIDIA driver"}, Capacity{
			OS: "linux", Arch: "amd64", CPUModel: "Ryzen", LogicalCPUs: 8, Cores: 7,
			MemoryTotalMiB: 32768, MemoryMiB: 16384, GPUs: []GPUOffer{}, Schedule: Schedule{}, TimeZone: "Europe/Berlin",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Defaults()
			tc.edit(&s)
			got := NewCapacity(m, s, tc.gpus)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapacityJSON(t *testing.T) {
	c := NewCapacity(Machine{OS: "linux", Arch: "arm64", LogicalCPUs: 2, MemoryTotalMiB: 1024, TimeZone: "UTC"}, Defaults(), Reading[[]GPU]{})
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"os":"linux","arch":"arm64","logical_cpus":2,"cores":1,"memory_total_mib":1024,"memory_mib":512,"gpus":[],"schedule":[],"time_zone":"UTC"}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
}

// TestReadMachine reads this machine: it must know the CPU count and,
// where gopsutil supports the OS, the memory.
func TestReadMachine(t *testing.T) {
	m, err := ReadMachine(context.Background())
	if err != nil {
		t.Logf("ReadMachine: %v", err)
	}
	if m.OS != runtime.GOOS || m.Arch != runtime.GOARCH || m.LogicalCPUs != runtime.NumCPU() {
		t.Errorf("ReadMachine = %+v", m)
	}
	if runtime.GOOS == "linux" && m.MemoryTotalMiB <= 0 {
		t.Errorf("no memory total on Linux: %+v (%v)", m, err)
	}
	if m.TimeZone == "" {
		t.Error("empty time zone name")
	}
	t.Logf("%+v", m)
}
