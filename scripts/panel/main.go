// Command panel is a minimal system-tray host for headless checks of the
// tray app: it owns org.kde.StatusNotifierWatcher on the D-Bus session
// bus, as a desktop panel does (the StatusNotifierItem specification,
// freedesktop.org), takes the tray icons that register with it, and
// prints, for each, a line with its title, status, tooltip and icon
// sizes read back over the bus:
//
//	item :1.5/StatusNotifierItem title="idlepool" status=Active icon=64x64 tooltip="Waiting: ..."
//
// It runs until killed. With -once it exits 0 after the first item has
// shown an icon, or 1 after -wait without one. scripts/tray-idle.sh and
// scripts/package-check.sh use it; it is not part of the app.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
)

const (
	watcherName = "org.kde.StatusNotifierWatcher"
	watcherPath = "/StatusNotifierWatcher"
	itemIface   = "org.kde.StatusNotifierItem"
)

// watcher is the org.kde.StatusNotifierWatcher object.
type watcher struct {
	conn  *dbus.Conn
	mu    sync.Mutex
	items []string
	found chan string
}

// RegisterStatusNotifierItem is called by a tray icon; service is a bus
// name or an object path on the caller's connection.
func (w *watcher) RegisterStatusNotifierItem(sender dbus.Sender, service string) *dbus.Error {
	dest, path := string(sender), service
	if !strings.HasPrefix(service, "/") {
		dest, path = service, "/StatusNotifierItem"
	}
	id := dest + path
	w.mu.Lock()
	w.items = append(w.items, id)
	w.mu.Unlock()
	go w.describe(dest, dbus.ObjectPath(path))
	return nil
}

// RegisterStatusNotifierHost is called by hosts; this one is its own.
func (w *watcher) RegisterStatusNotifierHost(string) *dbus.Error { return nil }

// describe reads the item's properties and prints them.
func (w *watcher) describe(dest string, path dbus.ObjectPath) {
	time.Sleep(500 * time.Millisecond) // let it set its icon
	obj := w.conn.Object(dest, path)
	get := func(name string) dbus.Variant {
		v, err := obj.GetProperty(itemIface + "." + name)
		if err != nil {
			return dbus.MakeVariant("")
		}
		return v
	}
	title, _ := get("Title").Value().(string)
	status, _ := get("Status").Value().(string)
	icon := "none"
	var pixmaps []struct {
		W, H int32
		Data []byte
	}
	if err := get("IconPixmap").Store(&pixmaps); err == nil && len(pixmaps) > 0 {
		var sizes []string
		for _, p := range pixmaps {
			if len(p.Data) > 0 {
				sizes = append(sizes, fmt.Sprintf("%dx%d", p.W, p.H))
			}
		}
		if len(sizes) > 0 {
			icon = strings.Join(sizes, ",")
		}
	}
	tip := ""
	var tt struct {
		Icon   string
		Pixmap []struct {
			W, H int32
			Data []byte
		}
		Title, Text string
	}
	if err := get("ToolTip").Store(&tt); err == nil {
		tip = strings.TrimSpace(tt.Title + " " + tt.Text)
	}
	fmt.Printf("item %s%s title=%q status=%s icon=%s tooltip=%q\n", dest, path, title, status, icon, tip)
	if mp, ok := get("Menu").Value().(dbus.ObjectPath); ok && mp != "" {
		for _, l := range menuLabels(w.conn.Object(dest, mp)) {
			fmt.Printf("  menu %s\n", l)
		}
	}
	if icon != "none" {
		select {
		case w.found <- dest:
		default:
		}
	}
}

// menuLabels reads the item's menu (com.canonical.dbusmenu GetLayout)
// and returns its entries' labels, disabled ones in brackets and checked
// ones with [x].
func menuLabels(obj dbus.BusObject) []string {
	type layout struct {
		ID       int32
		Props    map[string]dbus.Variant
		Children []dbus.Variant
	}
	var rev uint32
	var root layout
	call := obj.Call("com.canonical.dbusmenu.GetLayout", 0, int32(0), int32(-1), []string{})
	if call.Err != nil || call.Store(&rev, &root) != nil {
		return []string{"(menu unreadable)"}
	}
	var out []string
	for _, c := range root.Children {
		var item layout
		if err := dbus.Store([]any{c.Value()}, &item); err != nil {
			continue
		}
		if t, _ := item.Props["type"].Value().(string); t == "separator" {
			out = append(out, "---")
			continue
		}
		label, _ := item.Props["label"].Value().(string)
		if v, ok := item.Props["visible"]; ok && v.Value() == false {
			continue
		}
		if v, ok := item.Props["enabled"]; ok && v.Value() == false {
			label = "(" + label + ")"
		}
		if v, ok := item.Props["toggle-state"]; ok && v.Value() == int32(1) {
			label = "[x] " + label
		}
		out = append(out, label)
	}
	return out
}

func main() {
	once := flag.Bool("once", false, "exit after the first item shows an icon")
	wait := flag.Duration("wait", 60*time.Second, "with -once, how long to wait for an item")
	flag.Parse()
	conn, err := dbus.ConnectSessionBus()
	if err != nil {
		fmt.Fprintln(os.Stderr, "panel: session bus:", err)
		os.Exit(1)
	}
	w := &watcher{conn: conn, found: make(chan string, 1)}
	if err := conn.Export(w, watcherPath, watcherName); err != nil {
		fmt.Fprintln(os.Stderr, "panel:", err)
		os.Exit(1)
	}
	props, err := prop.Export(conn, watcherPath, prop.Map{watcherName: {
		"RegisteredStatusNotifierItems":  {Value: []string{}, Emit: prop.EmitTrue},
		"IsStatusNotifierHostRegistered": {Value: true, Emit: prop.EmitTrue},
		"ProtocolVersion":                {Value: int32(0), Emit: prop.EmitTrue},
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "panel:", err)
		os.Exit(1)
	}
	node := &introspect.Node{Name: watcherPath, Interfaces: []introspect.Interface{
		introspect.IntrospectData, prop.IntrospectData,
		{Name: watcherName, Methods: introspect.Methods(w), Properties: props.Introspection(watcherName)},
	}}
	if err := conn.Export(introspect.NewIntrospectable(node), watcherPath, "org.freedesktop.DBus.Introspectable"); err != nil {
		fmt.Fprintln(os.Stderr, "panel:", err)
		os.Exit(1)
	}
	reply, err := conn.RequestName(watcherName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		fmt.Fprintln(os.Stderr, "panel: cannot own", watcherName, err)
		os.Exit(1)
	}
	fmt.Println("panel: watching for tray icons")
	if !*once {
		select {}
	}
	select {
	case <-w.found:
		os.Exit(0)
	case <-time.After(*wait):
		fmt.Fprintln(os.Stderr, "panel: no tray icon registered within", *wait)
		os.Exit(1)
	}
}
