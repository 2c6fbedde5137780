package release

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
	"github.com/theupdateframework/go-tuf/v2/metadata/config"
	"github.com/theupdateframework/go-tuf/v2/metadata/updater"
	"golang.org/x/time/rate"

	"idlepool/version"
)

// Source is a release repository as a client reads it: its URL (the
// directory Publish wrote, served over HTTP(S)), the root metadata
// trusted first, and where the client keeps what it trusted since.
type Source struct {
	// URL is the release location: URL/metadata/ and URL/targets/.
	URL string
	// Root is the root metadata shipped with this build (root.json of
	// the release repository), trusted until Dir holds a newer one.
	Root []byte
	// Dir is where the client keeps its trusted metadata (Dir/metadata,
	// which is what rollback protection compares with) and its
	// downloads (Dir/download, the side path).
	Dir string
	// Now is the clock metadata expiry is judged by; nil: time.Now.
	Now func() time.Time
	// Client makes the requests; nil: a client with no overall timeout
	// (StallTimeout bounds each download instead).
	Client *http.Client
	// MaxBytes is the most bytes a release file may have (default 1 GiB);
	// a longer signed length is refused before any download.
	MaxBytes int64
	// StallTimeout ends a download that receives nothing for this long
	// (default 60 seconds).
	StallTimeout time.Duration
	// BytesPerSecond paces downloads; 0: as fast as the network goes.
	BytesPerSecond int
}

// Release is the newest release a Source offers for one platform and kind.
type Release struct {
	Version version.V
	Notes   string
	Kind    string
	OS      string
	Arch    string
	Name    string // the file's name in the release
	Length  int64  // its signed length in bytes

	target *metadata.TargetFiles
}

func (s *Source) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// updater returns go-tuf's client over s, with a fetcher bound to ctx.
func (s *Source) updater(ctx context.Context) (*updater.Updater, error) {
	if s.URL == "" {
		return nil, errors.New("release: no release location")
	}
	if _, err := url.Parse(s.URL); err != nil {
		return nil, fmt.Errorf("release location %q: %w", s.URL, err)
	}
	md := filepath.Join(s.Dir, "metadata")
	root := s.Root
	// The root trusted last (go-tuf keeps it there after each refresh)
	// is newer than or the same as the shipped one.
	if b, err := os.ReadFile(filepath.Join(md, "root.json")); err == nil {
		root = b
	}
	if len(root) == 0 {
		return nil, errors.New("release: no trusted root metadata")
	}
	cfg, err := config.New(s.URL+"/metadata", root)
	if err != nil {
		return nil, fmt.Errorf("release location %q: %w", s.URL, err)
	}
	cfg.RemoteTargetsURL = s.URL + "/targets"
	cfg.LocalMetadataDir = md
	cfg.LocalTargetsDir = filepath.Join(s.Dir, "download")
	client := s.Client
	if client == nil {
		client = &http.Client{}
	}
	stall := s.StallTimeout
	if stall <= 0 {
		stall = 60 * time.Second
	}
	f := &httpFetcher{ctx: ctx, client: client, stall: stall, agent: "idlepool/" + version.Version}
	if s.BytesPerSecond > 0 {
		f.limiter = rate.NewLimiter(rate.Limit(s.BytesPerSecond), max(s.BytesPerSecond, 32<<10))
	}
	cfg.Fetcher = f
	u, err := updater.New(cfg)
	if err != nil {
		return nil, classify(err)
	}
	u.UnsafeSetRefTime(s.now())
	return u, nil
}

// Latest refreshes the metadata (root, timestamp, snapshot, targets, each
// verified) and returns the newest release for goos, goarch and kind. The
// refusals wrap ErrBadSignature, ErrExpired, ErrRollback, ErrTampered,
// ErrTooLarge or ErrStalled; no file for the platform wraps ErrNoRelease.
// It keeps the verified metadata in Dir/metadata.
func (s *Source) Latest(ctx context.Context, goos, goarch, kind string) (Release, error) {
	u, err := s.updater(ctx)
	if err != nil {
		return Release{}, err
	}
	if err := u.Refresh(); err != nil {
		return Release{}, classify(err)
	}
	var best Release
	found := false
	for name, t := range u.GetTopLevelTargets() {
		c, err := customOf(t)
		if err != nil || c.OS != goos || c.Arch != goarch || c.Kind != kind {
			continue
		}
		v, err := version.Parse(c.Version)
		if err != nil {
			continue
		}
		if !found || best.Version.Less(v) {
			best = Release{Version: v, Notes: c.Notes, Kind: c.Kind, OS: c.OS, Arch: c.Arch, Name: name, Length: t.Length, target: t}
			found = true
		}
	}
	if !found {
		return Release{}, fmt.Errorf("%w: no %s for %s/%s at %s", ErrNoRelease, kind, goos, goarch, s.URL)
	}
	return best, nil
}

// Download fetches r's file (from Latest of the same Source) to the side
// path Dir/download/NAME, verifying its length and digest against the
// signed metadata, and returns that path. The file appears there only
// once verified (it is written beside and renamed). A signed length over
// MaxBytes, a longer body, a wrong digest or a stall are refused (ErrTooLarge,
// ErrTampered, ErrStalled) and leave nothing behind.
func (s *Source) Download(ctx context.Context, r Release) (string, error) {
	if r.target == nil {
		return "", fmt.Errorf("%w: release %s was not read from a Source", ErrBadRelease, r.Name)
	}
	limit := s.MaxBytes
	if limit <= 0 {
		limit = 1 << 30
	}
	if r.Length > limit {
		return "", fmt.Errorf("%w: %s is %d bytes, more than the %d allowed", ErrTooLarge, r.Name, r.Length, limit)
	}
	u, err := s.updater(ctx)
	if err != nil {
		return "", err
	}
	if err := u.Refresh(); err != nil {
		return "", classify(err)
	}
	// The target as the refreshed metadata says it now.
	t, err := u.GetTargetInfo(r.Name)
	if err != nil {
		return "", classify(err)
	}
	dir := filepath.Join(s.Dir, "download")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("download %s: %w", r.Name, err)
	}
	final := filepath.Join(dir, r.Name)
	part := final + ".part"
	if _, _, err := u.DownloadTarget(t, part, ""); err != nil {
		os.Remove(part)
		return "", classify(err)
	}
	if err := os.Rename(part, final); err != nil {
		os.Remove(part)
		return "", fmt.Errorf("download %s: %w", r.Name, err)
	}
	return final, nil
}

// classify wraps go-tuf's errors in this package's sentinels.
func classify(err error) error {
	var sentinel error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTooLarge), errors.Is(err, ErrStalled):
		return err
	case errors.Is(err, &metadata.ErrUnsignedMetadata{}):
		sentinel = ErrBadSignature
	case errors.Is(err, &metadata.ErrExpiredMetadata{}):
		sentinel = ErrExpired
	case errors.Is(err, &metadata.ErrBadVersionNumber{}):
		sentinel = ErrRollback
	case errors.Is(err, &metadata.ErrLengthOrHashMismatch{}):
		sentinel = ErrTampered
	case errors.Is(err, &metadata.ErrDownloadLengthMismatch{}):
		sentinel = ErrTooLarge
	default:
		return fmt.Errorf("release: %w", err)
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
