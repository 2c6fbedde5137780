package idle

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultsValidate(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Settings)
		want string // the start of the error; "" for none
	}{
		{"a window without days", func(s *Settings) { s.Schedule = Schedule{{Start: 60, End: 120}} }, "schedule: window 1:"},
		{"an empty window", func(s *Settings) { s.Schedule = Schedule{{Days: EveryDay, Start: 60, End: 60}} }, "schedule: window 1:"},
		{"an unknown zone", func(s *Settings) { s.TimeZone = "Mars/Olympus" }, "time_zone:"},
		{"a known zone", func(s *Settings) { s.TimeZone = "America/New_York" }, ""},
		{"negative cores", func(s *Settings) { s.Cores = -1 }, "cores:"},
		{"a share above 1", func(s *Settings) { s.CoresShare = 1.5 }, "cores_share:"},
		{"count and share", func(s *Settings) { s.Cores, s.CoresShare = 2, 0.5 }, "cores and cores_share:"},
		{"a CPU time share above 1", func(s *Settings) { s.CPUTimeShare = 1.5 }, "cpu_time_share: must be 0 (no limit) or a share from 0.05 to 1, got 1.5"},
		{"a CPU time share below the least", func(s *Settings) { s.CPUTimeShare = 0.01 }, "cpu_time_share:"},
		{"a negative CPU time share", func(s *Settings) { s.CPUTimeShare = -0.5 }, "cpu_time_share:"},
		{"a CPU time share of 1", func(s *Settings) { s.CPUTimeShare = 1 }, ""},
		{"no memory", func(s *Settings) { s.MemoryShare = 0 }, "memory_share:"},
		{"negative idle time", func(s *Settings) { s.IdleFor = -time.Second }, "idle_for:"},
		{"no idle time", func(s *Settings) { s.IdleFor = 0 }, ""},
		{"a load limit of 0", func(s *Settings) { s.MaxOtherCPUShare = 0 }, "max_other_cpu_share:"},
		{"a battery minimum above 100", func(s *Settings) { s.MinBatteryPercent = 101 }, "min_battery_percent:"},
		{"a negative ceiling", func(s *Settings) { s.MaxTemperatureC = -1 }, "max_temperature_c:"},
		{"a negative cache", func(s *Settings) { s.CacheMiB = -1 }, "cache_mib:"},
		{"a negative share cap", func(s *Settings) { s.ShareDiskMiB = -1 }, "share_disk_mib:"},
		{"an upload cap too small", func(s *Settings) { s.ShareUploadKiBps = 1 }, "share_upload_kibps:"},
		{"a negative upload cap", func(s *Settings) { s.ShareUploadKiBps = -64 }, "share_upload_kibps:"},
		{"no upload cap", func(s *Settings) { s.ShareUploadKiBps = ShareUploadUnlimited }, ""},
		{"no ceiling", func(s *Settings) { s.MaxTemperatureC = 0 }, ""},
		{"an empty program", func(s *Settings) { s.PauseFor = []string{"game.exe", " "} }, "pause_for: program 2"},
		{"a GPU memory share above 1", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-a": {Use: true, MemoryShare: 2}} }, "gpus.GPU-a.memory_share:"},
		{"a GPU ceiling too high", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-a": {MaxTemperatureC: 500}} }, "gpus.GPU-a.max_temperature_c:"},
		{"a GPU other share below 0", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-a": {MaxOtherShare: -0.1}} }, "gpus.GPU-a.max_other_share:"},
		{"a GPU without UUID", func(s *Settings) { s.GPUs = map[string]GPUSettings{"": {Use: true}} }, "gpus: a GPU has an empty UUID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Defaults()
			tc.edit(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error starting %q", err, tc.want)
			}
		})
	}
}

func TestCoresFor(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Settings)
		cpus  int
		cores int
	}{
		{"default: all but one", func(*Settings) {}, 8, 7},
		{"default on one CPU", func(*Settings) {}, 1, 1},
		{"unknown CPU count", func(*Settings) {}, 0, 1},
		{"a count", func(s *Settings) { s.Cores = 6 }, 8, 6},
		{"a count above the machine's", func(s *Settings) { s.Cores = 64 }, 8, 8},
		{"a share", func(s *Settings) { s.CoresShare = 0.75 }, 8, 6},
		{"a share rounds down", func(s *Settings) { s.CoresShare = 0.7 }, 8, 5},
		{"a share of 0.3 of 10 is 3 despite rounding", func(s *Settings) { s.CoresShare = 0.3 }, 10, 3},
		{"a tiny share is one", func(s *Settings) { s.CoresShare = 0.01 }, 8, 1},
		{"all", func(s *Settings) { s.CoresShare = 1 }, 8, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Defaults()
			tc.edit(&s)
			if got := s.CoresFor(tc.cpus); got != tc.cores {
				t.Errorf("CoresFor(%d) = %d, want %d", tc.cpus, got, tc.cores)
			}
		})
	}
}

func TestSet(t *testing.T) {
	now := time.Date(2026, 3, 10, 13, 5, 0, 0, time.UTC)
	tests := []struct {
		kv   string
		want func(*Settings)
		err  string
	}{
		{"hours=Mon-Fri 22:00-07:00", func(s *Settings) {
			s.Schedule = Schedule{{EveryDay &^ (1<<time.Saturday | 1<<time.Sunday), 22 * 60, 7 * 60}}
		}, ""},
		{"hours=always", func(*Settings) {}, ""},
		{"hours=Mon 7", nil, "hours=Mon 7: window"},
		{"time_zone=Europe/Berlin", func(s *Settings) { s.TimeZone = "Europe/Berlin" }, ""},
		{"time_zone=Nowhere/Else", nil, `time_zone: "Nowhere/Else" is not a known time zone`},
		{"cores=6", func(s *Settings) { s.Cores = 6 }, ""},
		{"cores=0.75", func(s *Settings) { s.CoresShare = 0.75 }, ""},
		{"cores=50%", func(s *Settings) { s.CoresShare = 0.5 }, ""},
		{"cores=default", func(*Settings) {}, ""},
		{"cores=0", nil, "cores=0: a count must be at least 1"},
		{"cores=150%", nil, "cores=150%: want a share"},
		{"memory=25%", func(s *Settings) { s.MemoryShare = 0.25 }, ""},
		{"cpu_time=50%", func(s *Settings) { s.CPUTimeShare = 0.5 }, ""},
		{"cpu_time=0.25", func(s *Settings) { s.CPUTimeShare = 0.25 }, ""},
		{"cpu_time_share=5%", func(s *Settings) { s.CPUTimeShare = 0.05 }, ""},
		{"cpu_time=100%", func(*Settings) {}, ""},
		{"cpu_time=full", func(*Settings) {}, ""},
		{"cpu_time=2%", nil, "cpu_time=2%: want a share from 5% to 100% (0.5 or 50%), or full"},
		{"cpu_time=150%", nil, "cpu_time=150%: want a share from 5% to 100%"},
		{"cpu_time=0", nil, "cpu_time=0: want a share from 5% to 100%"},
		{"cpu_time=hard", nil, "cpu_time=hard: want a share"},
		{"idle_priority=false", func(s *Settings) { s.NoIdlePriority = true }, ""},
		{"idle_priority=true", func(*Settings) {}, ""},
		{"idle_priority=high", nil, "idle_priority=high: want true or false"},
		{"idle_for=90s", func(s *Settings) { s.IdleFor = 90 * time.Second }, ""},
		{"idle_for=0", func(s *Settings) { s.IdleFor = 0 }, ""},
		{"idle_for=soon", nil, "idle_for=soon: want a duration"},
		{"remote_input=true", func(s *Settings) { s.RemoteInput = true }, ""},
		{"remote_input=false", func(*Settings) {}, ""},
		{"remote_input=sometimes", nil, "remote_input=sometimes: want true or false"},
		{"max_other_cpu=80%", func(s *Settings) { s.MaxOtherCPUShare = 0.8 }, ""},
		{"pause_on_battery=false", func(s *Settings) { s.PauseOnBattery = false }, ""},
		{"pause_on_battery=maybe", nil, "pause_on_battery=maybe:"},
		{"min_battery=30%", func(s *Settings) { s.MinBatteryPercent = 30 }, ""},
		{"pause_for=game.exe, steam,", func(s *Settings) { s.PauseFor = []string{"game.exe", "steam"} }, ""},
		{"pause_for=", func(*Settings) {}, ""},
		{"max_temperature=80°C", func(s *Settings) { s.MaxTemperatureC = 80 }, ""},
		{"max_temperature=hot", nil, "max_temperature=hot: want degrees"},
		{"cache=2GiB", func(s *Settings) { s.CacheMiB = 2048 }, ""},
		{"cache=1.5 G", func(s *Settings) { s.CacheMiB = 1536 }, ""},
		{"cache=500MB", func(s *Settings) { s.CacheMiB = 476 }, ""},
		{"cache=default", func(*Settings) {}, ""},
		{"cache=2", nil, `cache: "2" is not a size: write a number and a unit`},
		{"cache=2 parsecs", nil, `cache: "2 parsecs": unknown unit "parsecs"`},
		{"cache=10KiB", nil, `cache: "10KiB" is below 1 MiB`},
		{"cache=100TiB", nil, `cache: "100TiB" is above 64 TiB`},
		{"share_disk=1GiB", func(s *Settings) { s.ShareDiskMiB = 1024 }, ""},
		{"share_disk_mib=default", func(*Settings) {}, ""},
		{"share_disk=lots", nil, `share_disk: "lots" is not a size`},
		{"share_peers=false", func(s *Settings) { s.NoSharePeers = true }, ""},
		{"share_upload=2MiB/s", func(s *Settings) { s.ShareUploadKiBps = 2048 }, ""},
		{"share_upload=500 KB/s", func(s *Settings) { s.ShareUploadKiBps = 488 }, ""},
		{"share_upload=1.5MiB", func(s *Settings) { s.ShareUploadKiBps = 1536 }, ""},
		{"share_upload_kibps=unlimited", func(s *Settings) { s.ShareUploadKiBps = ShareUploadUnlimited }, ""},
		{"share_upload=0", func(s *Settings) { s.ShareUploadKiBps = ShareUploadUnlimited }, ""},
		{"share_upload=default", func(*Settings) {}, ""},
		{"share_upload=fast", nil, `share_upload: "fast" is not a rate`},
		{"share_upload=8Mbps", nil, `share_upload: "8Mbps": unknown unit "Mbps"`}, // bits or bytes: not guessed
		{"share_upload=2 furlongs/s", nil, `share_upload: "2 furlongs/s": unknown unit "furlongs"`},
		{"share_upload=10KB/s", nil, `share_upload: "10KB/s" is below 64 KiB/s`},
		{"share_upload=2TiB/s", nil, `share_upload: "2TiB/s": unknown unit "TiB"`},
		{"share_upload=2000GiB/s", nil, `share_upload: "2000GiB/s" is above 1 TiB/s`},
		{"share_peers=true", func(*Settings) {}, ""},
		{"share_peers=maybe", nil, "share_peers=maybe: want true or false"},
		{"pause=1h", func(s *Settings) { s.PausedUntil = now.Add(time.Hour) }, ""},
		{"pause=tomorrow", func(s *Settings) { s.PausedUntil = time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC) }, ""},
		{"pause=2026-03-10T18:00:00Z", func(s *Settings) { s.PausedUntil = time.Date(2026, 3, 10, 18, 0, 0, 0, time.UTC) }, ""},
		{"pause=off", func(*Settings) {}, ""},
		{"pause=-1h", nil, "pause=-1h: a pause must last more than 0"},
		{"gpu.GPU-1234.use=true", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-1234": {Use: true}} }, ""},
		{"gpu.GPU-1234.memory=0.8", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-1234": {MemoryShare: 0.8}} }, ""},
		{"gpu.GPU-1234.max_temperature=80", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-1234": {MaxTemperatureC: 80}} }, ""},
		{"gpu.GPU-1234.max_other=20%", func(s *Settings) { s.GPUs = map[string]GPUSettings{"GPU-1234": {MaxOtherShare: 0.2}} }, ""},
		{"gpu.GPU-1234.colour=red", nil, "idle: unknown setting"},
		{"colour=red", nil, "idle: unknown setting"},
	}
	for _, tc := range tests {
		t.Run(tc.kv, func(t *testing.T) {
			k, v, _ := strings.Cut(tc.kv, "=")
			got := Defaults()
			err := got.Set(k, v, now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Set = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Defaults()
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate after Set: %v", err)
			}
		})
	}
	s := Defaults()
	if err := s.Set("colour", "red", now); !errors.Is(err, ErrUnknownSetting) {
		t.Errorf("unknown key: %v, want ErrUnknownSetting", err)
	}
}

func TestSettingsJSON(t *testing.T) {
	s := Defaults()
	s.Schedule = Schedule{{EveryDay, 22 * 60, 7 * 60}}
	s.TimeZone = "Europe/Berlin"
	s.CoresShare = 0.5
	s.IdleFor = 90 * time.Second
	s.PauseFor = []string{"game.exe"}
	s.GPUs = map[string]GPUSettings{"GPU-a": {Use: true, MemoryShare: 0.8}}
	s.PausedUntil = time.Date(2026, 3, 10, 14, 5, 0, 0, time.UTC)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"idle_for":"1m30s"`) {
		t.Errorf("idle_for not a duration string: %s", b)
	}
	back := Defaults()
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	// A stored document from an older version lacks newer fields: they
	// keep their defaults.
	old := Defaults()
	if err := json.Unmarshal([]byte(`{"cores":3}`), &old); err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Cores = 3
	if diff := cmp.Diff(want, old); diff != "" {
		t.Errorf("partial document (-want +got):\n%s", diff)
	}
	// An owner's 0 (no temperature ceiling) is stored and read back as 0,
	// not as the default 85 °C.
	none := Defaults()
	none.MaxTemperatureC = 0
	if b, err = json.Marshal(none); err != nil {
		t.Fatal(err)
	}
	back = Defaults()
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.MaxTemperatureC != 0 {
		t.Errorf("max_temperature_c 0 read back as %g from %s", back.MaxTemperatureC, b)
	}
	if err := json.Unmarshal([]byte(`{"idle_for":"soon"}`), &old); err == nil || !strings.Contains(err.Error(), "idle_for") {
		t.Errorf("bad idle_for: %v", err)
	}
}

// TestShareUploadDefault: with no share_upload set the data plane is
// capped at DefaultShareUploadKiBps (1 MiB/s) for a home connection;
// "unlimited" lifts the cap (0 for p2p.NewUploadLimit), and a cap set is
// that cap.
func TestShareUploadDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kibps int64
		want  int64
	}{
		{"unset", 0, 1 << 20},
		{"unlimited", ShareUploadUnlimited, 0},
		{"2 MiB/s", 2048, 2 << 20},
	} {
		s := Defaults()
		s.ShareUploadKiBps = tc.kibps
		if got := s.ShareUploadBytesPerSecond(); got != tc.want {
			t.Errorf("%s: ShareUploadBytesPerSecond = %d, want %d", tc.name, got, tc.want)
		}
	}
	if DefaultShareUploadKiBps != 1024 {
		t.Errorf("DefaultShareUploadKiBps = %d, want 1024 (1 MiB/s, as docs/donor.md says)", DefaultShareUploadKiBps)
	}
}
