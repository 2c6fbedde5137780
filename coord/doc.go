// Package coord is the coordinator server of an idlepool pool (`idlepool
// serve`): the HTTP API of docs/api.md over a pool.Scheduler. It registers
// peers, stores jobs and their files by SHA-256, leases tasks, takes
// result submissions, hands verified outcomes to each job's merger and
// serves the signed, hash-chained ledger. It sequences and selects; it
// never merges or sums results (DESIGN.md, invariant 9): every scheduling
// rule lives in package pool, and this package only authenticates, checks
// and translates requests.
//
// It also keeps the peers' capacity offers (package offers) in memory,
// as soft state that agents re-send, lists the jobs seeking compute, and
// gives the scheduler its matchmaking (pool.SchedulerConfig.Select): a
// peer is leased tasks only of jobs that match its live offer, the
// donor's preferred jobs first; a peer without one counts as a CPU-only
// machine that accepts every job needing no GPU.
//
// State lives under Config.DataDir: coordinator.db (SQLite, package
// store), coordinator.key (the Ed25519 key that signs receipts) and
// blobs/ (content-addressed files, written to a temporary name, fsynced
// and renamed, so a file under its final name is always whole).
//
// Every request but the public reads (/healthz, /metrics, /v1/pool,
// /v1/ledger, /v1/blobs/…) is signed by the device key: api.SignRequest is
// the client side, which the donor agent and `idlepool submit` use. Refused
// requests (4xx) never change state: a request is authenticated, bounded
// and decoded in full before the scheduler sees it.
//
// A Server is safe for concurrent use; Serve owns every goroutine it
// starts (the HTTP server and the scheduler, under one errgroup) and
// returns only when they have stopped.
//
//	srv, err := coord.New(ctx, coord.Config{DataDir: dir, Listen: "127.0.0.1:7420"})
//	if err != nil {
//		return err
//	}
//	fmt.Println(srv.URL()) // the pool URL peers join with
//	return srv.Serve(ctx)  // until ctx is cancelled
//
// The API's wire format (its bodies, version, headers, limits and request
// signing) is package api (idlepool/coord/api), which a client imports
// without linking this server; coord names the same types (aliases). A
// client signs each request right before sending it:
//
//	body, _ := json.Marshal(api.LeaseRequest{Max: 2})
//	req, _ := http.NewRequestWithContext(ctx, "POST", poolURL+"/v1/leases", bytes.NewReader(body))
//	api.SignRequest(req, body, deviceKey, time.Now())
//	resp, err := http.DefaultClient.Do(req)
package coord
