package coord

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// ServeDirect answers as the Server's own listener does while Serve runs
// (a cluster node's public port hands it the requests of the node in
// charge); Serve's shutdown waits for a request it let in; once Serve
// has stopped it answers nothing (false), so that the node forwards the
// request to whichever node is in charge.
func TestServeDirect(t *testing.T) {
	ts, stop := runServer(t, nil)
	defer stop()
	var rec *httptest.ResponseRecorder
	waitUntil(t, patience(t), "Serve to run", func() bool {
		rec = httptest.NewRecorder()
		return ts.ServeDirect(rec, httptest.NewRequest("GET", "/v1/pool", nil))
	})
	var info PoolInfo
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &info) != nil || info.Pool != "test" {
		t.Fatalf("GET /v1/pool directly: %d %s; want 200 and pool test", rec.Code, rec.Body)
	}

	// An upload whose body is still arriving when Serve stops.
	const rest = `"name": 1}`
	p := newPeer(t, nil)
	ts.register(t, p, "", http.StatusCreated)
	pr, pw := io.Pipe()
	inflight := httptest.NewRequest("PUT", fmt.Sprintf("/v1/blobs/%x", sha256.Sum256([]byte("{"+rest))), pr)
	SignRequest(inflight, []byte("{"+rest), p.key, time.Now())
	inflight.ContentLength = int64(1 + len(rest))
	rec = httptest.NewRecorder()
	answered := make(chan bool, 1)
	go func() { answered <- ts.ServeDirect(rec, inflight) }()
	reading := make(chan struct{})
	go func() { pw.Write([]byte("{")); close(reading) }() // returns once the handler reads
	select {
	case <-reading:
	case <-answered:
		t.Fatalf("the upload was answered %d %s before its body was read", rec.Code, rec.Body)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Serve returned while a request it let in was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	pw.Write([]byte(rest))
	pw.Close()
	if !<-answered {
		t.Fatal("the request in flight was not answered")
	}
	<-stopped
	if rec.Code != http.StatusCreated {
		t.Errorf("the upload in flight got %d %s; want 201", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	if ts.ServeDirect(rec, httptest.NewRequest("GET", "/v1/pool", nil)) {
		t.Errorf("ServeDirect answered %d after Serve stopped; want false", rec.Code)
	}
}
