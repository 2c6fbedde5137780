package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// LocalAPIFile is the conventional name of the local API's socket (or, on
// Windows, its address file) in the data directory: <data>/agent.sock.
const LocalAPIFile = "agent.sock"

// The local API is two HTTP endpoints for programs of the same user on
// the same machine (the tray app, `idlepool status`, `idlepool settings`):
//
//	GET  /v1/status  ->  200, AgentStatus as JSON
//	POST /v1/reload  ->  204 once the engine will read the owner's settings
//	                     and joined pools at its next sample (Donor.Reload);
//	                     404 from an engine without settings (one Agent)
//
// On Linux and macOS it is served on a Unix domain socket of mode 0600,
// so only the owner (and root) can connect. On Windows it is served on
// 127.0.0.1 at a random port; the file at the path holds the base URL and
// a random token on two lines (in the user's own data directory), and
// every request must carry "Authorization: Bearer <token>". The reload
// changes nothing by itself (it reads what the store already holds), so
// the same access control serves both.
const (
	statusPath = "/v1/status"
	reloadPath = "/v1/reload"
)

// serveLocalAPI serves Status at path until ctx ends (see serveStatus).
func (a *Agent) serveLocalAPI(ctx context.Context, path string) error {
	return serveStatus(ctx, path, a.gov.log, a.Status, nil)
}

// serveStatus serves status, and reload when it is not nil, at path until
// ctx ends, then shuts the server down and removes the socket (or address
// file). Failing to listen is logged, not fatal: the agent computes
// without its local API.
func serveStatus(ctx context.Context, path string, log *slog.Logger, status func() AgentStatus, reload func()) error {
	ln, check, cleanup, err := listenLocal(path)
	if err != nil {
		log.Warn("Local API unavailable", "path", path, "err", err)
		return nil
	}
	defer cleanup()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+statusPath, func(w http.ResponseWriter, r *http.Request) {
		if !check(r) {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status())
	})
	if reload != nil {
		mux.HandleFunc("POST "+reloadPath, func(w http.ResponseWriter, r *http.Request) {
			if !check(r) {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			reload()
			log.Debug("Settings reload asked through the local API")
			w.WriteHeader(http.StatusNoContent)
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Debug("Local API listening", "path", path)
	select {
	case err := <-done:
		return fmt.Errorf("agent: local API: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-done
	return nil
}

// ReadStatus asks the agent whose local API is at path (Config.LocalAPI)
// what it is doing. It fails with an error wrapping ErrNoAgent when no
// agent answers there (none runs, or the socket is stale).
func ReadStatus(ctx context.Context, path string) (AgentStatus, error) {
	resp, err := askLocal(ctx, path, http.MethodGet, statusPath)
	if err != nil {
		return AgentStatus{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return AgentStatus{}, fmt.Errorf("agent: local API %s: %s: %s", path, resp.Status, b)
	}
	var st AgentStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st); err != nil {
		return AgentStatus{}, fmt.Errorf("agent: local API %s: decode status: %w", path, err)
	}
	return st, nil
}

// AskReload asks the engine whose local API is at path (a Donor's
// DonorConfig.LocalAPI, the tray's or `idlepool join`'s) to read the
// owner's settings and joined pools now (Donor.Reload), as the tray does
// after a change: a pause set with `idlepool settings set` then takes
// effect at the engine's next sample instead of its next periodic read.
// It fails with an error wrapping ErrNoAgent when no agent answers there,
// and wrapping errors.ErrUnsupported when the agent there has no settings
// to read (a single Agent).
func AskReload(ctx context.Context, path string) error {
	resp, err := askLocal(ctx, path, http.MethodPost, reloadPath)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return nil
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return fmt.Errorf("agent: local API %s: reload: %w", path, errors.ErrUnsupported)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return fmt.Errorf("agent: local API %s: reload: %s: %s", path, resp.Status, b)
}

// askLocal sends one request without a body to the local API at path.
// Failing to reach it is an error wrapping ErrNoAgent.
func askLocal(ctx context.Context, path, method, endpoint string) (*http.Response, error) {
	base, header, dial, err := dialLocal(path)
	if err != nil {
		return nil, fmt.Errorf("%w: local API %s: %w", ErrNoAgent, path, err)
	}
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	req, err := http.NewRequestWithContext(ctx, method, base+endpoint, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: local API %s: %w", ErrNoAgent, path, err)
	}
	return resp, nil
}
