// Command xgame stands in, on a bare X server (Xvfb), for the two programs
// the full-screen game sign reads: a window manager and a game.
//
//	xgame wm      a minimal EWMH window manager: it maps the windows that
//	              ask to be mapped, names the last one mapped in the root
//	              window's _NET_ACTIVE_WINDOW (None when it goes), and
//	              applies the _NET_WM_STATE requests clients send to the
//	              root window (add, remove, toggle), as GNOME's or KDE's
//	              window manager does.
//	xgame game    a game: it opens a window titled by -title, maps it and
//	              asks the window manager for full screen the way SDL does
//	              (a _NET_WM_STATE client message to the root window,
//	              EWMH 1.5), prints "ready" and closes its window when its
//	              standard input closes.
//
// Both take the X server from $DISPLAY. The tests build it with go build.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

func main() {
	title := flag.String("title", "Game", "the game window's title")
	flag.Parse()
	xgb.Logger.SetOutput(io.Discard) // a missing ~/.Xauthority on every connection
	conn, err := xgb.NewConn()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xgame:", err)
		os.Exit(1)
	}
	defer conn.Close()
	switch flag.Arg(0) {
	case "wm":
		err = wm(conn)
	case "game":
		err = game(conn, *title)
	default:
		err = fmt.Errorf("usage: xgame wm | xgame [-title T] game")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xgame:", err)
		os.Exit(1)
	}
}

func atom(conn *xgb.Conn, name string) xproto.Atom {
	r, err := xproto.InternAtom(conn, false, uint16(len(name)), name).Reply()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xgame: intern", name, err)
		os.Exit(1)
	}
	return r.Atom
}

func setWindow(conn *xgb.Conn, win xproto.Window, prop xproto.Atom, typ xproto.Atom, vals []uint32) {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		xgb.Put32(b[4*i:], v)
	}
	xproto.ChangeProperty(conn, xproto.PropModeReplace, win, prop, typ, 32, uint32(len(vals)), b)
}

func wm(conn *xgb.Conn) error {
	root := xproto.Setup(conn).DefaultScreen(conn).Root
	active, state := atom(conn, "_NET_ACTIVE_WINDOW"), atom(conn, "_NET_WM_STATE")
	mask := uint32(xproto.EventMaskSubstructureRedirect | xproto.EventMaskSubstructureNotify)
	if err := xproto.ChangeWindowAttributesChecked(conn, root, xproto.CwEventMask, []uint32{mask}).Check(); err != nil {
		return fmt.Errorf("another window manager runs: %w", err)
	}
	setWindow(conn, root, active, xproto.AtomWindow, []uint32{0})
	states := map[xproto.Window][]uint32{}
	var current xproto.Window
	fmt.Println("ready")
	for {
		ev, err := conn.WaitForEvent()
		if ev == nil && err == nil {
			return nil // connection closed
		}
		if err != nil {
			continue // an X error of a request of ours (a window already gone)
		}
		switch e := ev.(type) {
		case xproto.MapRequestEvent:
			xproto.MapWindow(conn, e.Window)
			current = e.Window
			setWindow(conn, root, active, xproto.AtomWindow, []uint32{uint32(current)})
		case xproto.UnmapNotifyEvent:
			if e.Window == current {
				current = 0
				setWindow(conn, root, active, xproto.AtomWindow, []uint32{0})
			}
		case xproto.DestroyNotifyEvent:
			delete(states, e.Window)
			if e.Window == current {
				current = 0
				setWindow(conn, root, active, xproto.AtomWindow, []uint32{0})
			}
		case xproto.ClientMessageEvent:
			if e.Type != state || e.Format != 32 {
				continue
			}
			d := e.Data.Data32 // action, first property, second property, source
			have := states[e.Window]
			for _, p := range d[1:3] {
				if p == 0 {
					continue
				}
				i := -1
				for j, s := range have {
					if s == p {
						i = j
					}
				}
				switch {
				case (d[0] == 1 || d[0] == 2) && i < 0: // _NET_WM_STATE_ADD, _TOGGLE
					have = append(have, p)
				case (d[0] == 0 || d[0] == 2) && i >= 0: // _NET_WM_STATE_REMOVE, _TOGGLE
					have = append(have[:i], have[i+1:]...)
				}
			}
			states[e.Window] = have
			setWindow(conn, e.Window, state, xproto.AtomAtom, have)
		}
	}
}

func game(conn *xgb.Conn, title string) error {
	screen := xproto.Setup(conn).DefaultScreen(conn)
	win, err := xproto.NewWindowId(conn)
	if err != nil {
		return err
	}
	if err := xproto.CreateWindowChecked(conn, screen.RootDepth, win, screen.Root, 0, 0, 200, 100, 0,
		xproto.WindowClassInputOutput, screen.RootVisual, 0, nil).Check(); err != nil {
		return fmt.Errorf("create window: %w", err)
	}
	name, utf8 := atom(conn, "_NET_WM_NAME"), atom(conn, "UTF8_STRING")
	xproto.ChangeProperty(conn, xproto.PropModeReplace, win, name, utf8, 8, uint32(len(title)), []byte(title))
	xproto.ChangeProperty(conn, xproto.PropModeReplace, win, xproto.AtomWmName, xproto.AtomString, 8, uint32(len(title)), []byte(title))
	if err := xproto.MapWindowChecked(conn, win).Check(); err != nil {
		return fmt.Errorf("map: %w", err)
	}
	state, full := atom(conn, "_NET_WM_STATE"), atom(conn, "_NET_WM_STATE_FULLSCREEN")
	ev := xproto.ClientMessageEvent{Format: 32, Window: win, Type: state,
		Data: xproto.ClientMessageDataUnionData32New([]uint32{1, uint32(full), 0, 1, 0})}
	mask := uint32(xproto.EventMaskSubstructureRedirect | xproto.EventMaskSubstructureNotify)
	if err := xproto.SendEventChecked(conn, false, screen.Root, mask, string(ev.Bytes())).Check(); err != nil {
		return fmt.Errorf("ask for full screen: %w", err)
	}
	if _, err := xproto.GetInputFocus(conn).Reply(); err != nil { // a round trip: the requests are processed
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	return xproto.DestroyWindowChecked(conn, win).Check()
}
