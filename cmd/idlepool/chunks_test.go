package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/castore"
	"idlepool/home"
)

// metricValue reads the sample named exactly name (with its labels) from
// the coordinator's /metrics; -1 when absent.
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// TestJoinFetchesInputsInChunks runs csvstats over a 700 KB input on two
// `idlepool join` agents: they fetch the input in chunks by its
// manifest (the coordinator never sends it whole), keep the chunks in
// their chunk stores and announce them to the pool's tracker, and the
// result equals `run --json`.
func TestJoinFetchesInputsInChunks(t *testing.T) {
	t.Parallel()
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	var homes []string
	for i := range 2 {
		h := filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
		homes = append(homes, h)
		startJoin(t, h, url)
	}
	var csv strings.Builder
	csv.WriteString("a,b,c\n")
	for i := 0; csv.Len() < 700<<10; i++ {
		fmt.Fprintf(&csv, "%d,%d.5,%d\n", i, i%1000, i%97)
	}
	dataPath := filepath.Join(t.TempDir(), "data.csv")
	if err := os.WriteFile(dataPath, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(exampleManifest(t, "csvstats"), `data = "data.csv"`, `data = "`+dataPath+`"`, 1)
	text = strings.Replace(text, "chunk_bytes = 1048576", "chunk_bytes = 262144", 1)
	m := writeManifest(t, "csvstats", text)
	_, want := runJSON(t, t.TempDir(), m)
	// The submitter offers nothing from its device: the agents fetch the
	// chunks from the coordinator (and each other).
	subHome := t.TempDir()
	if out := idlepool(t, subHome, "settings", "set", "share_peers=false"); out.code != 0 {
		t.Fatalf("settings set share_peers=false: exit %d\n%s", out.code, out.stderr)
	}
	out := idlepool(t, subHome, "submit", m, "--pool", url, "--follow", "--json")
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
	}
	chunked := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input_chunk"}`)
	whole := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input"}`)
	if chunked < float64(csv.Len()) || whole != 0 {
		t.Errorf("input bytes served: %v in chunks, %v whole; want at least the input's %d in chunks and none whole", chunked, whole, csv.Len())
	}
	data, err := castore.ManifestOfFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	holders := 0
	for _, h := range homes {
		dirs, err := home.Resolve(h)
		if err != nil {
			t.Fatal(err)
		}
		// As the agent finds them after a restart: the chunks of the files
		// in its cache.
		cache := agent.NewCache(agent.CacheConfig{Dir: agent.JobCache(dirs), ShareDir: agent.ShareDir(dirs)})
		st, err := cache.ShareStore()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Missing(data)) == 0 {
			holders++
		}
	}
	if holders == 0 {
		t.Fatalf("no agent's chunk store holds the input's %d chunks", len(data.Chunks))
	}
	// The agents announce what they hold: the tracker lists every chunk
	// of the input for each holder.
	deadline := patient(t)
	for {
		n := metricValue(t, url, "idlepool_coord_tracker_chunks")
		if n >= float64(holders*len(data.Chunks)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracker lists %v chunk holdings, want at least %d", n, holders*len(data.Chunks))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
