package agent

import (
	"context"
	"io"
	"net/http"
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
