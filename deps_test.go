package idlepool_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// layers lists the top-level packages in dependency order: a package may
// import project packages of lower rank only (see STYLE.md). Sub-packages
// take their parent's rank and may import their parent.
//
// store ranks above pool: it implements pool.Store (the interface pool owns
// as its consumer), so it names pool's record types (Peer, Entry, Batch,
// Snapshot); pool depends only on that interface, never on store.
// cluster ranks with store for the same reason: it is the other
// implementation of pool.Store (the pool's state in JetStream), which
// coord serves.
var layers = map[string]int{
	"job": 0, "home": 0, "identity": 0, "assets": 0, "castore": 0, "energy": 0, "version": 0, "web": 0,
	"worker": 1, "p2p": 1, "release": 1, "idle": 2, "offers": 3, "pool": 4,
	"store": 5, "cluster": 5, "webpeer": 5, "coord": 6, "agent": 7, "app": 8,
}

// onlyIn says which top-level package alone may import a module path prefix.
var onlyIn = map[string]string{
	"fyne.io/":                      "app",
	"github.com/NVIDIA/go-nvml":     "worker",
	"github.com/ebitengine/purego":  "worker",
	"github.com/tetratelabs/wazero": "worker",
	"github.com/pion/":              "p2p",
	"github.com/nats-io/":           "cluster",
	// The Update Framework's client and metadata, and the signers it
	// signs with: the releases and the self-update alone.
	"github.com/theupdateframework/": "release",
	"github.com/sigstore/":           "release",
	// The Ed25519 point a request key is agreed on (identity.Key.Agree).
	"filippo.io/edwards25519": "identity",
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func top(path string) string {
	rest, ok := strings.CutPrefix(path, "idlepool/")
	if !ok {
		return ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}

func TestPackageLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		from := top(p.ImportPath)
		rank, ranked := layers[from]
		for _, imp := range p.Imports {
			to := top(imp)
			if to == "" {
				for prefix, owner := range onlyIn {
					if strings.HasPrefix(imp, prefix) && from != owner {
						t.Errorf("%s imports %s; only %s may", p.ImportPath, imp, owner)
					}
				}
				continue
			}
			if !ranked || to == from {
				continue // commands and examples may import anything; a package its own sub-packages
			}
			if r, ok := layers[to]; !ok || r >= rank {
				t.Errorf("%s imports %s, which is not below it in the layering (STYLE.md)", p.ImportPath, imp)
			}
		}
	}
}

// TestTrayLinksNoGraphicsToolkit: the tray program, which sits in the
// tray all day, links no Fyne driver (GLFW, OpenGL): its windows are the
// program idlepool-window (cmd/idlepool-window). Each package linked
// costs the tray resident memory, its code mapped from the binary.
func TestTrayLinksNoGraphicsToolkit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/idlepool-tray").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "fyne.io/fyne/v2/app" || strings.HasPrefix(p, "github.com/go-gl/") || strings.HasPrefix(p, "fyne.io/fyne/v2/internal/driver/glfw") {
			t.Errorf("cmd/idlepool-tray links %s: the windows belong to cmd/idlepool-window", p)
		}
	}
}

// TestTrayLinksNoServer: the tray program links no coordinator server
// (idlepool/coord), nor the cluster (idlepool/cluster) and the NATS
// server and client it runs on, which coord links: the agent speaks the
// API through idlepool/coord/api alone. Linked, nats-server's process
// statistics package reads /proc/PID/stat once a second from its init,
// in every program that links it (about 6% of the tray's CPU at rest),
// and the server's code makes the program larger. Checked for each
// system the tray is built for.
func TestTrayLinksNoServer(t *testing.T) {
	for _, goos := range []string{"linux", "windows", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "./cmd/idlepool-tray")
			cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=1")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list for %s: %v", goos, err)
			}
			for _, p := range strings.Fields(string(out)) {
				if p == "idlepool/coord" || p == "idlepool/cluster" || strings.HasPrefix(p, "idlepool/cluster/") || strings.HasPrefix(p, "github.com/nats-io/") {
					t.Errorf("cmd/idlepool-tray for %s links %s: the agent imports the API's wire format (idlepool/coord/api), never the server", goos, p)
				}
			}
		})
	}
}
