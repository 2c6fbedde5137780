package desktop

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"idlepool/agent"
	"idlepool/app"
)

// remoteStatusAge is how long the window process reuses the status it
// read from the tray's engine.
const remoteStatusAge = time.Second

// remoteTimeout bounds one read of the engine's status.
const remoteTimeout = 2 * time.Second

// remoteEngine is the tray process's engine as the window process sees
// it: Status reads the engine's local API (agent.ReadStatus), Reload asks
// the tray process over its single-instance socket (app.Ask). Safe for
// concurrent use.
type remoteEngine struct {
	path string // the local API's socket (agent.LocalAPIFile)
	dir  string // the data directory, where the tray instance listens
	log  *slog.Logger

	mu   sync.Mutex
	at   time.Time // when last was read; zero: read again
	last agent.AgentStatus
}

var _ app.Engine = (*remoteEngine)(nil)

// newRemoteEngine returns the engine whose local API is at path and whose
// tray instance listens in the data directory dir.
func newRemoteEngine(path, dir string, log *slog.Logger) *remoteEngine {
	return &remoteEngine{path: path, dir: dir, log: log}
}

// Status is the engine's status, read at most every remoteStatusAge; the
// zero status when the engine does not answer (the tray process quit).
func (e *remoteEngine) Status() agent.AgentStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.at.IsZero() && time.Since(e.at) < remoteStatusAge {
		return e.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	st, err := agent.ReadStatus(ctx, e.path)
	if err != nil {
		e.log.Debug("Cannot read the engine's status", "err", err)
		st = agent.AgentStatus{}
	}
	e.last, e.at = st, time.Now()
	return st
}

// Reload asks the tray process to have its engine read the store now; a
// failure is logged (the engine reads the store every few seconds
// anyway).
func (e *remoteEngine) Reload() {
	if err := app.Ask(e.dir, app.TrayInstance, app.Request{Command: app.CommandReload}); err != nil {
		e.log.Warn("Cannot ask the tray to reload its settings", "err", err)
	}
	e.mu.Lock()
	e.at = time.Time{}
	e.mu.Unlock()
}
