package idle

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file parses the output of macOS's ioreg and pmset. It has no build
// constraint so that the parsers are tested on every platform; only
// sources_darwin.go runs the commands.

// hidIdleRe matches the IOHIDSystem property in `ioreg -c IOHIDSystem -d 4`:
//
//	|   "HIDIdleTime" = 1234567890
var hidIdleRe = regexp.MustCompile(`"HIDIdleTime"\s*=\s*(\d+)`)

// parseIoregIdle returns HIDIdleTime from ioreg's output. IOHIDSystem keeps
// it in nanoseconds since the last keyboard, mouse or trackpad event of any
// session on the machine (not only the console user's).
func parseIoregIdle(out string) (time.Duration, error) {
	m := hidIdleRe.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("ioreg: no HIDIdleTime in output")
	}
	ns, err := strconv.ParseUint(m[1], 10, 63)
	if err != nil {
		return 0, fmt.Errorf("ioreg: HIDIdleTime: %w", err)
	}
	return time.Duration(ns), nil
}

// pmsetPercentRe matches the battery line of `pmset -g batt`:
//
//	-InternalBattery-0 (id=4653155)	43%; discharging; 3:12 remaining present: true
var pmsetPercentRe = regexp.MustCompile(`(\d{1,3})%`)

// parsePmset reads `pmset -g batt`. Its first line names the source the
// Mac draws from: 'AC Power', 'Battery Power' or 'UPS Power'. Lines that
// start with "-InternalBattery" describe the internal battery; other
// "-Name (id=...)" lines are UPSes, which do not make a Mac "on battery".
func parsePmset(out string) (Power, error) {
	var pw Power
	var source string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "Now drawing from "); ok {
			source = strings.Trim(rest, "'\" ")
			continue
		}
		if strings.HasPrefix(line, "-InternalBattery") {
			pw.HasBattery = true
			if m := pmsetPercentRe.FindStringSubmatch(line); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				pw.Percent = min(100, v)
			}
		}
	}
	if source == "" {
		return Power{}, fmt.Errorf("pmset: no power source in output")
	}
	pw.OnBattery = pw.HasBattery && source == "Battery Power"
	return pw, nil
}
