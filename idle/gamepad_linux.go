//go:build linux

package idle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// gamepadIdle is an InputIdleSource over game controllers (gamepads,
// joysticks, wheels): a person playing with one gives no keyboard or mouse
// input, and logind and X11 (whose idle times come from the desktop's
// keyboard and pointer) call them idle.
//
// It reads the controllers' own events, from two kinds of device node
// under dev ("/dev/input"):
//
//   - jsN, the joystick interface (joydev) that the kernel gives every
//     controller while the joydev module is loaded: struct js_event
//     (linux/joystick.h), 8 bytes;
//   - eventN nodes of controllers without a jsN node (joydev not loaded),
//     told from keyboards and mice by their key capabilities in sys
//     ("/sys/class/input/eventN/device/capabilities/key": a button in
//     BTN_JOYSTICK..BTN_THUMBR, 0x120..0x13e, as udev's input_id tags
//     ID_INPUT_JOYSTICK): struct input_event (linux/input.h). Keyboards'
//     and mice's nodes are never opened.
//
// Desktop sessions give the seat's user read access to controllers (udev's
// uaccess tag); nodes it may not read are left out. Each node is opened
// once, non-blocking, and kept open: every call drains what arrived since
// the last one (a game reading the same node still gets every event).
// A button pressed or released, or an axis moved by more than an eighth
// of its range from where it was (a worn stick's jitter is not a person),
// is activity, dated when the call reads it (within one sample period).
// The initial state the joystick interface reports on opening is not.
//
// Until it has seen activity it answers ErrNoSource (it cannot tell how
// long a controller has lain untouched, and the other sources answer for
// that time); afterwards the time since the last activity. Close closes
// the nodes.
type gamepadIdle struct {
	dev string           // "/dev/input"; a temporary directory in tests
	sys string           // "/sys/class/input"
	now func() time.Time // nil: time.Now

	mu       sync.Mutex
	open     map[string]*gamepadNode // by path
	last     time.Time               // the latest activity seen; zero: none yet
	lastFrom string                  // the node it came from
}

// gamepadNode is one open controller node and its axes' last positions.
type gamepadNode struct {
	fd    int              // opened O_NONBLOCK: a read without events fails with EAGAIN
	js    bool             // a jsN node (js_event), else evdev (input_event)
	axes  map[uint16]int32 // the last known position of each axis
	spans map[uint16]int32 // evdev: each axis's range (max-min)
	rest  []byte           // a partial event left by the last read
}

var (
	_ InputIdleSource = (*gamepadIdle)(nil)
	_ io.Closer       = (*gamepadIdle)(nil)
)

// Event types and flags of linux/joystick.h and linux/input-event-codes.h.
const (
	jsEventButton = 0x01
	jsEventAxis   = 0x02
	jsEventInit   = 0x80
	evKey         = 0x01
	evAbs         = 0x03
	btnJoystick   = 0x120 // BTN_JOYSTICK, the first controller button
	btnThumbR     = 0x13e // BTN_THUMBR, the last gamepad button
)

// jsEventSize and inputEventSize are the sizes of struct js_event and of
// this platform's struct input_event (a struct timeval, then type, code
// and value).
const (
	jsEventSize    = 8
	inputEventSize = int(unsafe.Sizeof(syscall.Timeval{})) + 8
)

func (g *gamepadIdle) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// IdleTime implements InputIdleSource.
func (g *gamepadIdle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	nodes, refused := g.controllers()
	if g.open == nil {
		g.open = map[string]*gamepadNode{}
	}
	for path, n := range g.open {
		if !slices.Contains(nodes, path) {
			syscall.Close(n.fd)
			delete(g.open, path)
		}
	}
	for _, path := range nodes {
		if g.open[path] != nil {
			continue
		}
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			refused++
			continue
		}
		g.open[path] = &gamepadNode{fd: fd, js: strings.HasPrefix(filepath.Base(path), "js"),
			axes: map[uint16]int32{}, spans: map[uint16]int32{}}
	}
	for path, n := range g.open {
		active, err := n.drain()
		if err != nil { // unplugged (ENODEV): opened again if it comes back
			syscall.Close(n.fd)
			delete(g.open, path)
		}
		if active {
			g.last, g.lastFrom = now, path
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, "", fmt.Errorf("game controllers: %w", err)
	}
	switch {
	case !g.last.IsZero():
		return max(0, now.Sub(g.last)), g.lastFrom, nil
	case len(g.open) > 0:
		return 0, "", fmt.Errorf("game controllers: %d watched, none used yet: %w", len(g.open), ErrNoSource)
	case refused > 0:
		return 0, "", fmt.Errorf("game controllers: %d under %s not readable: %w", refused, g.dev, ErrNoSource)
	}
	return 0, "", fmt.Errorf("game controllers: none under %s: %w", g.dev, ErrNoSource)
}

// controllers lists the controller nodes under g.dev: every jsN, and each
// eventN that is a controller without a jsN of its own. refused counts
// those whose capabilities cannot be read.
func (g *gamepadIdle) controllers() (nodes []string, refused int) {
	nodes, _ = filepath.Glob(filepath.Join(g.dev, "js[0-9]*"))
	events, _ := filepath.Glob(filepath.Join(g.dev, "event[0-9]*"))
	for _, ev := range events {
		device := filepath.Join(g.sys, filepath.Base(ev), "device")
		if js, _ := filepath.Glob(filepath.Join(device, "js[0-9]*")); len(js) > 0 {
			continue // read through its jsN node
		}
		b, err := os.ReadFile(filepath.Join(device, "capabilities", "key"))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				refused++
			}
			continue
		}
		if hasControllerButton(string(b)) {
			nodes = append(nodes, ev)
		}
	}
	return nodes, refused
}

// hasControllerButton reports whether a key capability bitmap, as sysfs
// writes it (hexadecimal words of the platform's long, most significant
// first, separated by spaces), has a button in BTN_JOYSTICK..BTN_THUMBR.
func hasControllerButton(bitmap string) bool {
	words := strings.Fields(bitmap)
	const bits = 8 * int(unsafe.Sizeof(uintptr(0)))
	for code := btnJoystick; code <= btnThumbR; code++ {
		i := len(words) - 1 - code/bits // words run from the most significant
		if i < 0 {
			continue
		}
		w, err := strconv.ParseUint(words[i], 16, 64)
		if err == nil && w&(1<<(code%bits)) != 0 {
			return true
		}
	}
	return false
}

// drain reads the events that are waiting on n and reports whether any
// of them was a person's. It returns an error when the node is gone.
func (n *gamepadNode) drain() (active bool, err error) {
	size := inputEventSize
	if n.js {
		size = jsEventSize
	}
	buf := make([]byte, 64*size)
	for range 64 { // at most 4096 events a call: a flood cannot hold the probe
		k, err := syscall.Read(n.fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if k > 0 {
			data := append(n.rest, buf[:k]...)
			for len(data) >= size {
				if n.event(data[:size]) {
					active = true
				}
				data = data[size:]
			}
			n.rest = slices.Clone(data)
		}
		switch {
		case err == syscall.EAGAIN || (err == nil && k == 0):
			return active, nil // nothing more now
		case err != nil:
			return active, err
		}
	}
	return active, nil
}

// event interprets one event and reports whether it was a person's.
func (n *gamepadNode) event(b []byte) bool {
	if n.js {
		value := int32(int16(binary.NativeEndian.Uint16(b[4:6])))
		typ, number := b[6], uint16(b[7])
		switch {
		case typ&jsEventAxis != 0:
			return n.axis(number, value, 65535, typ&jsEventInit != 0)
		case typ&jsEventButton != 0:
			return typ&jsEventInit == 0
		}
		return false
	}
	off := int(unsafe.Sizeof(syscall.Timeval{}))
	typ := binary.NativeEndian.Uint16(b[off:])
	code := binary.NativeEndian.Uint16(b[off+2:])
	value := int32(binary.NativeEndian.Uint32(b[off+4:]))
	switch typ {
	case evKey:
		return true
	case evAbs:
		return n.axis(code, value, n.span(code), false)
	}
	return false
}

// axis records an axis position and reports whether it moved by more
// than an eighth of span from the last known one (the first position
// known is no movement).
func (n *gamepadNode) axis(code uint16, value, span int32, initial bool) bool {
	last, known := n.axes[code]
	n.axes[code] = value
	if initial || !known {
		return false
	}
	d := int64(value) - int64(last)
	return d*8 > int64(span) || -d*8 > int64(span)
}

// span is the range of evdev axis code, from EVIOCGABS (struct
// input_absinfo: value, minimum, maximum, ...); 65535 when the node does
// not say (a 16-bit axis).
func (n *gamepadNode) span(code uint16) int32 {
	if s, ok := n.spans[code]; ok {
		return s
	}
	var info [6]int32
	const iocRead = 2
	req := uintptr(iocRead<<30 | unsafe.Sizeof(info)<<16 | 'E'<<8 | (0x40 + uintptr(code)))
	s := int32(65535)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(n.fd), req, uintptr(unsafe.Pointer(&info))); e == 0 && info[2] > info[1] {
		s = info[2] - info[1]
	}
	n.spans[code] = s
	return s
}

// Close closes the controller nodes; a later IdleTime opens them again.
func (g *gamepadIdle) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for path, n := range g.open {
		syscall.Close(n.fd)
		delete(g.open, path)
	}
	return nil
}
