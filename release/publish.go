package release

import (
	"crypto"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"

	"idlepool/version"
)

// Kinds of release files (File.Kind, Release.Kind).
const (
	// KindTarball is the Linux tarball: the programs under a bin/
	// directory (usr/local/bin/ in the package), which a user install
	// replaces in place.
	KindTarball = "tarball"
	// KindDeb is the Debian package, which the package manager installs.
	KindDeb = "deb"
	// KindWindowsInstaller is the per-user Windows installer (NSIS),
	// run silently (/S) to update.
	KindWindowsInstaller = "windows-installer"
)

// File is one file of a release: Path on this machine, published under
// Name (its base name when empty), of Kind for OS and Arch (GOOS and
// GOARCH words).
type File struct {
	Path     string
	Name     string
	Kind     string
	OS, Arch string
}

// PublishOptions are a release's version and notes and the expiries of
// its metadata. Now is the clock (time.Now when nil). Zero expiries take
// the defaults: root a year, targets and snapshot 90 days, timestamp 14
// days (past which clients refuse the release: the operator re-signs it
// with Refresh before then).
type PublishOptions struct {
	Version string // X.Y.Z
	Notes   string // the CHANGELOG section
	Now     func() time.Time

	RootExpiry, TargetsExpiry, SnapshotExpiry, TimestampExpiry time.Duration
}

func (o *PublishOptions) defaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.RootExpiry, 365*24*time.Hour)
	def(&o.TargetsExpiry, 90*24*time.Hour)
	def(&o.SnapshotExpiry, 90*24*time.Hour)
	def(&o.TimestampExpiry, 14*24*time.Hour)
}

// custom is a target's custom field in the targets metadata.
type custom struct {
	Version string `json:"version"`
	Kind    string `json:"kind"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Notes   string `json:"notes,omitempty"`
}

// safeName is what a published file's name may be.
var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

// Publish adds a release of files to the repository in dir (created when
// absent: then keys.Root signs a new root of version 1), replacing the
// previous release's list of files (their bytes stay under targets/ for
// clients in the middle of a download). It writes new targets, snapshot
// and timestamp metadata, each one version above the last, signed with
// keys. A key that is not the one the root names for its role, a version
// not newer than the last release's, or a bad file name is an error.
func Publish(dir string, keys Keys, files []File, opt PublishOptions) error {
	opt.defaults()
	now := opt.Now().UTC()
	v, err := version.Parse(opt.Version)
	if err != nil || v.IsDev() {
		return fmt.Errorf("publish: release version %q: want X.Y.Z", opt.Version)
	}
	if len(files) == 0 {
		return fmt.Errorf("publish %s: no files", opt.Version)
	}
	md := filepath.Join(dir, "metadata")
	td := filepath.Join(dir, "targets")
	for _, d := range []string{md, td} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	root, err := loadOrCreateRoot(md, keys, now.Add(opt.RootExpiry))
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	for role, k := range map[string]ed25519.PrivateKey{metadata.TARGETS: keys.Targets, metadata.SNAPSHOT: keys.Snapshot, metadata.TIMESTAMP: keys.Timestamp} {
		if err := checkRoleKey(root, role, k); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}

	last := latestVersion(md, metadata.TARGETS)
	targets := metadata.Targets(now.Add(opt.TargetsExpiry))
	targets.Signed.Version = last + 1
	if last > 0 {
		prev, err := metadata.Targets().FromFile(filepath.Join(md, fmt.Sprintf("%d.targets.json", last)))
		if err != nil {
			return fmt.Errorf("publish: read the last targets: %w", err)
		}
		for _, t := range prev.Signed.Targets {
			if c, err := customOf(t); err == nil {
				if pv, err := version.Parse(c.Version); err == nil && !pv.Less(v) {
					return fmt.Errorf("publish: version %s is not newer than the published %s", v, pv)
				}
			}
		}
	}
	for _, f := range files {
		name := f.Name
		if name == "" {
			name = filepath.Base(f.Path)
		}
		if !safeName.MatchString(name) {
			return fmt.Errorf("publish: file name %q: want letters, digits, '.', '_', '+', '-'", name)
		}
		if f.Kind == "" || f.OS == "" || f.Arch == "" {
			return fmt.Errorf("publish: %s needs a kind, an OS and an architecture", name)
		}
		tf, err := metadata.TargetFile().FromFile(f.Path, "sha256")
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		tf.Path = name
		c, err := json.Marshal(custom{Version: v.String(), Kind: f.Kind, OS: f.OS, Arch: f.Arch, Notes: opt.Notes})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		raw := json.RawMessage(c)
		tf.Custom = &raw
		if err := copyFile(f.Path, filepath.Join(td, hex.EncodeToString(tf.Hashes["sha256"])+"."+name)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		targets.Signed.Targets[name] = tf
	}
	if err := signWrite(targets, keys.Targets, filepath.Join(md, fmt.Sprintf("%d.targets.json", targets.Signed.Version))); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return resign(md, keys, targets.Signed.Version, now, opt)
}

// Init creates the repository in dir with a root of version 1 signed by
// keys.Root, unless it exists: make release does so before building, so
// that the programs it builds trust that root (BuildRoot).
func Init(dir string, keys Keys, opt PublishOptions) error {
	opt.defaults()
	md := filepath.Join(dir, "metadata")
	if err := os.MkdirAll(md, 0o755); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if _, err := loadOrCreateRoot(md, keys, opt.Now().UTC().Add(opt.RootExpiry)); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	return nil
}

// Refresh re-signs the repository in dir with a new snapshot and
// timestamp over its current targets, so that clients keep accepting it
// past the last timestamp's expiry (run it more often than
// TimestampExpiry, from cron for instance). It needs keys.Snapshot and
// keys.Timestamp only.
func Refresh(dir string, keys Keys, opt PublishOptions) error {
	opt.defaults()
	md := filepath.Join(dir, "metadata")
	last := latestVersion(md, metadata.TARGETS)
	if last == 0 {
		return fmt.Errorf("refresh %s: no release published there", dir)
	}
	root, err := metadata.Root().FromFile(filepath.Join(md, "root.json"))
	if err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	for role, k := range map[string]ed25519.PrivateKey{metadata.SNAPSHOT: keys.Snapshot, metadata.TIMESTAMP: keys.Timestamp} {
		if err := checkRoleKey(root, role, k); err != nil {
			return fmt.Errorf("refresh: %w", err)
		}
	}
	return resign(md, keys, last, opt.Now().UTC(), opt)
}

// resign writes the next snapshot (naming targets version tv) and
// timestamp.
func resign(md string, keys Keys, tv int64, now time.Time, opt PublishOptions) error {
	snap := metadata.Snapshot(now.Add(opt.SnapshotExpiry))
	snap.Signed.Version = latestVersion(md, metadata.SNAPSHOT) + 1
	snap.Signed.Meta["targets.json"] = metadata.MetaFile(tv)
	if err := signWrite(snap, keys.Snapshot, filepath.Join(md, fmt.Sprintf("%d.snapshot.json", snap.Signed.Version))); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	ts := metadata.Timestamp(now.Add(opt.TimestampExpiry))
	ts.Signed.Version = snap.Signed.Version
	ts.Signed.Meta["snapshot.json"] = metadata.MetaFile(snap.Signed.Version)
	// timestamp.json is the file clients ask for first: replaced
	// atomically, and last, once everything it names is in place.
	tmp := filepath.Join(md, ".timestamp.json.new")
	if err := signWrite(ts, keys.Timestamp, tmp); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(md, "timestamp.json")); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// loadOrCreateRoot reads md/root.json, or creates, signs and writes root
// version 1 (as 1.root.json and root.json) from keys.
func loadOrCreateRoot(md string, keys Keys, expires time.Time) (*metadata.Metadata[metadata.RootType], error) {
	p := filepath.Join(md, "root.json")
	if _, err := os.Stat(p); err == nil {
		return metadata.Root().FromFile(p)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if len(keys.Root) == 0 || keys.RootThreshold < 1 || keys.RootThreshold > len(keys.Root) {
		return nil, fmt.Errorf("%w: a new repository needs root keys and a threshold from 1 to their number", ErrBadKeys)
	}
	root := metadata.Root(expires)
	root.Signed.ConsistentSnapshot = true
	add := func(k ed25519.PrivateKey, role string) error {
		pub, err := metadata.KeyFromPublicKey(k.Public())
		if err != nil {
			return err
		}
		return root.Signed.AddKey(pub, role)
	}
	for role, k := range map[string]ed25519.PrivateKey{metadata.TARGETS: keys.Targets, metadata.SNAPSHOT: keys.Snapshot, metadata.TIMESTAMP: keys.Timestamp} {
		if k == nil {
			return nil, fmt.Errorf("%w: no %s key", ErrBadKeys, role)
		}
		if err := add(k, role); err != nil {
			return nil, err
		}
	}
	for _, k := range keys.Root {
		if err := add(k, metadata.ROOT); err != nil {
			return nil, err
		}
	}
	root.Signed.Roles[metadata.ROOT].Threshold = keys.RootThreshold
	for _, k := range keys.Root {
		if err := sign(root, k); err != nil {
			return nil, err
		}
	}
	if err := root.ToFile(filepath.Join(md, "1.root.json"), true); err != nil {
		return nil, err
	}
	if err := root.ToFile(p, true); err != nil {
		return nil, err
	}
	return root, nil
}

// checkRoleKey says whether k is one of the keys root names for role.
func checkRoleKey(root *metadata.Metadata[metadata.RootType], role string, k ed25519.PrivateKey) error {
	if k == nil {
		return fmt.Errorf("%w: no %s key", ErrBadKeys, role)
	}
	pub, err := metadata.KeyFromPublicKey(k.Public())
	if err != nil {
		return err
	}
	id, err := pub.ID()
	if err != nil {
		return err
	}
	r, ok := root.Signed.Roles[role]
	if !ok {
		return fmt.Errorf("%w: the root names no %s role", ErrBadKeys, role)
	}
	for _, want := range r.KeyIDs {
		if want == id {
			return nil
		}
	}
	return fmt.Errorf("%w: the %s key given is not one the repository's root names for that role", ErrBadKeys, role)
}

type signable interface {
	Sign(signature.Signer) (*metadata.Signature, error)
}

func sign(m signable, k ed25519.PrivateKey) error {
	s, err := signature.LoadSigner(k, crypto.Hash(0))
	if err != nil {
		return err
	}
	_, err = m.Sign(s)
	return err
}

type signWritable interface {
	signable
	ToFile(name string, pretty bool) error
}

func signWrite(m signWritable, k ed25519.PrivateKey, path string) error {
	if err := sign(m, k); err != nil {
		return err
	}
	return m.ToFile(path, true)
}

// latestVersion is the highest N of md/N.ROLE.json, 0 when none.
func latestVersion(md, role string) int64 {
	ents, _ := os.ReadDir(md)
	var best int64
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), "."+role+".json")
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > best {
			best = v
		}
	}
	return best
}

func customOf(t *metadata.TargetFiles) (custom, error) {
	var c custom
	if t.Custom == nil {
		return c, fmt.Errorf("%w: %s has no custom fields", ErrBadRelease, t.Path)
	}
	if err := json.Unmarshal(*t.Custom, &c); err != nil {
		return c, fmt.Errorf("%w: %s: %w", ErrBadRelease, t.Path, err)
	}
	return c, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".new"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}
