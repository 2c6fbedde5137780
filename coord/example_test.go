package coord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"idlepool/coord"
	"idlepool/identity"
)

// A client signs each request with its device key right before sending.
func ExampleSignRequest() {
	key, _ := identity.FromSeed(make([]byte, 32)) // a fixed key, for a fixed output
	body := []byte(`{"max":2}`)
	req, _ := http.NewRequest("POST", "http://127.0.0.1:7420/v1/leases", nil)
	coord.SignRequest(req, body, key, time.UnixMilli(1_800_000_000_000))
	fmt.Println(req.Header.Get("Authorization"))
	// Output: Idlepool peer=idcopdsqhgjnkjc4rardm2bv2bmkh4qjxa, ts=1800000000000, sig=I9nLSee09t5wFhGY2VT2NT00yqoiqff6e6mp9N5EajJ6wSnXxp+j3B0CS1Bb3Lhp34T1d4qPRBc8sm4LRKdnAg==
}

// A coordinator on a free port of the loopback interface, stopped by
// cancelling its context.
func ExampleServer() {
	dir, _ := os.MkdirTemp("", "coord-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: dir, Pool: "lab"})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()

	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL() + "/v1/pool")
	if err == nil {
		var info coord.PoolInfo
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		fmt.Println(info.Pool, info.InviteOnly, len(info.Key))
	}
	tr.CloseIdleConnections()
	cancel()
	fmt.Println(<-done)
	// Output:
	// lab false 32
	// <nil>
}
