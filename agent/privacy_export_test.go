package agent

import (
	"context"
	"io"
	"net/http"
	"time"

	"idlepool/offers"
)

// GetRaw sends GET path (no query) signed by c's device and returns the
// answer's body as the pool sent it, for tests that must see every byte
// another device reads (Client.Offers redacts what it decodes).
func GetRaw(ctx context.Context, c *Client, path string) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil, payload{}, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// OfferFor builds and signs a's capacity offer now as it goes to a pool
// of API version version (coord.APIVersion), without asking the pool.
func OfferFor(ctx context.Context, a *Agent, version int) offers.Offer {
	a.c.work.mu.Lock()
	a.c.work.version = version
	a.c.work.mu.Unlock()
	return a.offer(ctx, time.Now())
}
