package cluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Init into a directory that holds a node's directory already refuses
// with ErrNodeDirExists, names the directory and leaves every file as it
// was; names that are not plain and distinct are a bad config.
func TestInitRefusesWhatItWouldOverwrite(t *testing.T) {
	dir := t.TempDir()
	nodes := []InitNode{{Name: "node1", Listen: "127.0.0.1:8101", RouteListen: "127.0.0.1:6101"},
		{Name: "node2", Listen: "127.0.0.1:8102", RouteListen: "127.0.0.1:6102"}}
	if _, err := Init(dir, "lab", 0, nodes); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "node1", "data", PoolKeyFile)
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Init(dir, "lab", 0, nodes)
	if !errors.Is(err, ErrNodeDirExists) || errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), filepath.Join(dir, "node1")) {
		t.Errorf("Init again = %v, want ErrNodeDirExists naming %s", err, filepath.Join(dir, "node1"))
	}
	if after, err := os.ReadFile(key); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the pool key after a refused Init: changed or lost (%v)", err)
	}
	for _, bad := range [][]InitNode{nil, {{Name: "a/b"}}, {{Name: "x"}, {Name: "x"}}, {{Name: ""}}} {
		if _, err := Init(t.TempDir(), "lab", 0, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("Init(%+v) = %v, want ErrConfig", bad, err)
		}
	}
}
