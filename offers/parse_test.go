package offers

import (
	"strings"
	"testing"
	"time"
)

func TestParsePoolChoices(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func() (any, error)
		want any
		err  string
	}{
		{"weight", func() (any, error) { return ParseWeight(" 2.5 ") }, 2.5, ""},
		{"weight 0", func() (any, error) { return ParseWeight("0") }, 0.0, ""},
		{"weight negative", func() (any, error) { return ParseWeight("-1") }, nil, `weight takes a number of 0 or more`},
		{"weight NaN", func() (any, error) { return ParseWeight("NaN") }, nil, `got "NaN"`},
		{"weight infinite", func() (any, error) { return ParseWeight("Inf") }, nil, `got "Inf"`},
		{"memory", func() (any, error) { return ParseTaskMemoryMiB("2048") }, int64(2048), ""},
		{"memory empty", func() (any, error) { return ParseTaskMemoryMiB("") }, int64(0), ""},
		{"memory with a unit", func() (any, error) { return ParseTaskMemoryMiB("2GiB") }, nil, "memory takes MiB as a whole number"},
		{"time", func() (any, error) { return ParseTaskTime("30m") }, 30 * time.Minute, ""},
		{"time 0", func() (any, error) { return ParseTaskTime("0") }, time.Duration(0), ""},
		{"time without a unit", func() (any, error) { return ParseTaskTime("30") }, nil, "time takes a duration such as 90s"},
		{"time negative", func() (any, error) { return ParseTaskTime("-1m") }, nil, "time takes a duration"},
		{"on", func() (any, error) { return ParseOnOff("Yes") }, true, ""},
		{"off", func() (any, error) { return ParseOnOff("off") }, false, ""},
		{"maybe", func() (any, error) { return ParseOnOff("maybe") }, nil, "gpu-programs takes on or off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.run()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("= %v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
