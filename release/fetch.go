package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
	"github.com/theupdateframework/go-tuf/v2/metadata/fetcher"
	"golang.org/x/time/rate"
)

// httpFetcher is go-tuf's Fetcher over one HTTP client, bounded: at most
// maxLength bytes (the signed length for a file, go-tuf's bound for
// metadata), a read that yields nothing for stall ends the download, and
// a limiter paces the bytes. go-tuf's Fetcher takes no context, so the
// fetcher carries the one of the operation it was made for (one Source
// call), and is not kept past it.
type httpFetcher struct {
	ctx     context.Context
	client  *http.Client
	stall   time.Duration
	limiter *rate.Limiter // nil: no pacing
	agent   string
}

var _ fetcher.Fetcher = (*httpFetcher)(nil)

// DownloadFile implements fetcher.Fetcher. A 404 or other non-200
// answer is go-tuf's *metadata.ErrDownloadHTTP (a 404 for root N+1 ends
// its root walk); a body longer than maxLength wraps ErrTooLarge; a
// stall wraps ErrStalled.
func (f *httpFetcher) DownloadFile(url string, maxLength int64, _ time.Duration) ([]byte, error) {
	ctx, cancel := context.WithCancelCause(f.ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", f.agent)
	// The stall timer runs from the request until the first byte, then
	// is reset by every read that yields bytes.
	timer := time.AfterFunc(f.stall, func() { cancel(ErrStalled) })
	defer timer.Stop()
	res, err := f.client.Do(req)
	if err != nil {
		return nil, f.cause(ctx, url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, &metadata.ErrDownloadHTTP{StatusCode: res.StatusCode, URL: url}
	}
	if res.ContentLength > maxLength {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d expected", ErrTooLarge, url, res.ContentLength, maxLength)
	}
	buf := make([]byte, 0, min(max(res.ContentLength, 0), maxLength)+1)
	chunk := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(chunk)
		if n > 0 {
			timer.Reset(f.stall)
			if int64(len(buf)+n) > maxLength {
				return nil, fmt.Errorf("%w: %s is longer than the %d bytes expected", ErrTooLarge, url, maxLength)
			}
			buf = append(buf, chunk[:n]...)
			if f.limiter != nil {
				if werr := f.limiter.WaitN(ctx, min(n, f.limiter.Burst())); werr != nil {
					return nil, f.cause(ctx, url, werr)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, f.cause(ctx, url, err)
		}
	}
}

// cause is err, or ErrStalled when the stall timer ended the request.
func (f *httpFetcher) cause(ctx context.Context, url string, err error) error {
	if errors.Is(context.Cause(ctx), ErrStalled) {
		return fmt.Errorf("%w: %s sent nothing for %v", ErrStalled, url, f.stall)
	}
	return fmt.Errorf("download %s: %w", url, err)
}
