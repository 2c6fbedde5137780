package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"idlepool/coord/api"
	"idlepool/p2p"
)

// Signaller returns the p2p.Signaller of this device: signed calls to the
// coordinator's signalling API (docs/api.md, "Signalling"). It is safe
// for concurrent use.
func (c *Client) Signaller() p2p.Signaller { return signaller{c} }

type signaller struct{ c *Client }

var _ p2p.Signaller = signaller{}

// Send posts s (POST /v1/signals). Errors: *APIError (409 replay, 429
// mailbox full, 400 bad signal, 404 unknown device; 410 when the
// recipient stopped listening, wrapped in p2p.ErrPeerOffline),
// ErrUnavailable.
func (s signaller) Send(ctx context.Context, sig p2p.Signal) error {
	body, err := json.Marshal(sig)
	if err != nil {
		return err
	}
	_, err = s.c.do(ctx, http.MethodPost, "/v1/signals", nil, body, true, nil)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusGone && ae.Code == "peer_offline" {
		return fmt.Errorf("%w: %w", p2p.ErrPeerOffline, err)
	}
	return err
}

// Receive long-polls the device's mailbox (GET /v1/signals), waiting up
// to api.DefaultSignalWait.
func (s signaller) Receive(ctx context.Context) ([]p2p.Signal, error) {
	var ans api.SignalsAnswer
	q := url.Values{"waitMs": {strconv.FormatInt(api.DefaultSignalWait.Milliseconds(), 10)}}
	if _, err := s.c.do(ctx, http.MethodGet, "/v1/signals", q, nil, true, &ans); err != nil {
		return nil, err
	}
	return ans.Signals, nil
}

// ICEServers asks the coordinator for ICE servers with fresh TURN
// credentials (GET /v1/ice).
func (s signaller) ICEServers(ctx context.Context) ([]p2p.ICEServer, error) {
	var ans api.ICEAnswer
	if _, err := s.c.do(ctx, http.MethodGet, "/v1/ice", nil, nil, true, &ans); err != nil {
		return nil, err
	}
	return ans.ICEServers, nil
}
