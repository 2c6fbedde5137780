//go:build linux

package idle

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// jsEvent is a struct js_event: time (ms), value, type, number.
func jsEvent(typ byte, number byte, value int16) []byte {
	b := make([]byte, jsEventSize)
	binary.NativeEndian.PutUint16(b[4:], uint16(value))
	b[6], b[7] = typ, number
	return b
}

// inputEvent is this platform's struct input_event.
func inputEvent(typ, code uint16, value int32) []byte {
	b := make([]byte, inputEventSize)
	off := int(unsafe.Sizeof(syscall.Timeval{}))
	binary.NativeEndian.PutUint16(b[off:], typ)
	binary.NativeEndian.PutUint16(b[off+2:], code)
	binary.NativeEndian.PutUint32(b[off+4:], uint32(value))
	return b
}

func appendFile(t *testing.T, path string, chunks ...[]byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range chunks {
		if _, err := f.Write(c); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGamepadIdle plays with controllers whose device nodes are files the
// test appends events to: a joystick node (js0) and the event node of a
// gamepad without one (event7); a keyboard's event node beside them is
// never read. Buttons and real stick moves are use, a stick's jitter and
// the state reported on opening are not.
func TestGamepadIdle(t *testing.T) {
	dev, sys := t.TempDir(), t.TempDir()
	js0 := filepath.Join(dev, "js0")
	// The joystick interface's initial state on opening: no one's input.
	appendFile(t, js0, jsEvent(jsEventButton|jsEventInit, 0, 0), jsEvent(jsEventAxis|jsEventInit, 0, 0))
	// event7: a gamepad without a js node (BTN_SOUTH, 0x130, in its keys);
	// event5: the event node of js0's controller (read through js0);
	// event3: a keyboard (KEY_A..KEY_Z only), never opened.
	ev7, ev5, ev3 := filepath.Join(dev, "event7"), filepath.Join(dev, "event5"), filepath.Join(dev, "event3")
	bits := 8 * int(unsafe.Sizeof(uintptr(0)))
	gamepadKeys := strings.TrimSpace(strings.Repeat("0 ", 0x130/bits)) // words below BTN_SOUTH's
	gamepadKeys = strings.TrimSpace("7fdb000000000000 " + gamepadKeys)
	if bits == 32 {
		gamepadKeys = "ffff0000 0 0 0 0 0 0 0 0 0"
	}
	writeFile(t, filepath.Join(sys, "event7", "device", "capabilities", "key"), gamepadKeys+"\n")
	writeFile(t, filepath.Join(sys, "event5", "device", "capabilities", "key"), gamepadKeys+"\n")
	writeFile(t, filepath.Join(sys, "event5", "device", "js0", "dev"), "13:0\n")
	writeFile(t, filepath.Join(sys, "event3", "device", "capabilities", "key"), "1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe\n")
	for _, p := range []string{ev7, ev5, ev3} {
		appendFile(t, p)
	}

	now := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	g := &gamepadIdle{dev: dev, sys: sys, now: func() time.Time { return now }}
	defer g.Close()
	check := func(step string, want time.Duration, wantSrc string) {
		t.Helper()
		got, src, err := g.IdleTime(t.Context())
		if want < 0 {
			if !errors.Is(err, ErrNoSource) {
				t.Errorf("%s: IdleTime = %v, %q, %v; want ErrNoSource (no use seen yet)", step, got, src, err)
			}
			return
		}
		if err != nil || got != want || src != wantSrc {
			t.Errorf("%s: IdleTime = %v, %q, %v; want %v from %s", step, got, src, err, want, wantSrc)
		}
	}

	check("controllers untouched", -1, "")
	if len(g.open) != 2 || g.open[js0] == nil || g.open[ev7] == nil {
		t.Fatalf("open nodes %v, want js0 and event7 (event5 is js0's, event3 a keyboard)", g.open)
	}
	now = now.Add(time.Minute)
	appendFile(t, js0, jsEvent(jsEventButton, 0, 1)) // a button pressed
	check("button pressed", 0, js0)
	now = now.Add(30 * time.Second)
	appendFile(t, js0, jsEvent(jsEventAxis, 0, 900), jsEvent(jsEventAxis, 0, -700)) // jitter
	check("stick jitter", 30*time.Second, js0)
	now = now.Add(10 * time.Second)
	appendFile(t, js0, jsEvent(jsEventAxis, 0, 20000)) // a real move
	check("stick moved", 0, js0)
	now = now.Add(2 * time.Minute)
	appendFile(t, ev7, inputEvent(evKey, 0x130, 1), inputEvent(0, 0, 0)) // BTN_SOUTH, SYN_REPORT
	check("evdev button", 0, ev7)
	now = now.Add(5 * time.Minute)
	appendFile(t, ev7, inputEvent(evAbs, 0, 100), inputEvent(evAbs, 0, 300)) // first position, then jitter
	check("evdev jitter", 5*time.Minute, ev7)

	if err := os.Remove(js0); err != nil { // unplugged
		t.Fatal(err)
	}
	check("js0 unplugged", 5*time.Minute, ev7)
	if g.open[js0] != nil {
		t.Error("an unplugged controller's node is still open")
	}
}

func TestHasControllerButton(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("bitmaps below are 64-bit words")
	}
	for bitmap, want := range map[string]bool{
		"7fdb000000000000 0 0 0 0": true,  // Xbox pad: BTN_SOUTH.. in word 4
		"ffff00000000 0 0 0 0":     true,  // joystick: BTN_TRIGGER.. (0x120)
		"0":                        false, // nothing
		"1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe": false, // keyboard
		"70000 0 0 0 0": false, // mouse: BTN_LEFT.. (0x110)
	} {
		if got := hasControllerButton(bitmap); got != want {
			t.Errorf("hasControllerButton(%q) = %v, want %v", bitmap, got, want)
		}
	}
}
