package release

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// RotateRoot moves the repository in dir to the keys next: it writes
// root version N+1 (N the current root's) naming next's keys for every
// role, with next.RootThreshold and a fresh expiry (opt.RootExpiry),
// signed by the keys of old.Root that the current root names (at least
// its threshold of them) and by every key of next.Root. A client that trusts root N fetches
// N+1 and accepts it only with both thresholds met (TUF's root chain,
// specification 5.3), so installed programs move to the new keys at
// their next check and refuse what the old keys alone sign from then
// on. It then re-signs the current targets, snapshot and timestamp with
// next's role keys, so that the release on offer stays valid under the
// new root.
//
// Rotating to the same keys renews the root's expiry (a year by
// default: past it, clients refuse every release). Too few of old.Root
// among the current root's keys, or next without a key for a role, is
// an error wrapping ErrBadKeys; the repository is then left as it was.
func RotateRoot(dir string, old, next Keys, opt PublishOptions) error {
	opt.defaults()
	now := opt.Now().UTC()
	md := filepath.Join(dir, "metadata")
	cur, err := metadata.Root().FromFile(filepath.Join(md, "root.json"))
	if err != nil {
		return fmt.Errorf("rotate root: read the current root: %w", err)
	}
	if len(next.Root) == 0 || next.RootThreshold < 1 || next.RootThreshold > len(next.Root) {
		return fmt.Errorf("rotate root: %w: the new keys need root keys and a threshold from 1 to their number", ErrBadKeys)
	}
	for role, k := range map[string]ed25519.PrivateKey{metadata.TARGETS: next.Targets, metadata.SNAPSHOT: next.Snapshot, metadata.TIMESTAMP: next.Timestamp} {
		if k == nil {
			return fmt.Errorf("rotate root: %w: the new keys have no %s key", ErrBadKeys, role)
		}
	}
	var signers []ed25519.PrivateKey
	for _, k := range old.Root {
		if checkRoleKey(cur, metadata.ROOT, k) == nil {
			signers = append(signers, k)
		}
	}
	if want := cur.Signed.Roles[metadata.ROOT].Threshold; len(signers) < want {
		return fmt.Errorf("rotate root: %w: the current root (version %d) needs %d of its root keys, and %d of the old keys given are among them",
			ErrBadKeys, cur.Signed.Version, want, len(signers))
	}

	nr := metadata.Root(now.Add(opt.RootExpiry))
	nr.Signed.Version = cur.Signed.Version + 1
	nr.Signed.ConsistentSnapshot = cur.Signed.ConsistentSnapshot
	for role, ks := range map[string][]ed25519.PrivateKey{metadata.ROOT: next.Root, metadata.TARGETS: {next.Targets},
		metadata.SNAPSHOT: {next.Snapshot}, metadata.TIMESTAMP: {next.Timestamp}} {
		for _, k := range ks {
			pub, err := metadata.KeyFromPublicKey(k.Public())
			if err != nil {
				return fmt.Errorf("rotate root: %w", err)
			}
			if err := nr.Signed.AddKey(pub, role); err != nil {
				return fmt.Errorf("rotate root: %w", err)
			}
		}
	}
	nr.Signed.Roles[metadata.ROOT].Threshold = next.RootThreshold
	seen := map[string]bool{}
	for _, k := range append(signers, next.Root...) {
		id := string(k.Public().(ed25519.PublicKey))
		if seen[id] {
			continue // a key of both roots signs once
		}
		seen[id] = true
		if err := sign(nr, k); err != nil {
			return fmt.Errorf("rotate root: %w", err)
		}
	}
	// What a client checks: the old root's keys and threshold, then the
	// new one's own.
	if err := cur.VerifyDelegate(metadata.ROOT, nr); err != nil {
		return fmt.Errorf("rotate root: %w: the old root does not accept the new one: %w", ErrBadKeys, err)
	}
	if err := nr.VerifyDelegate(metadata.ROOT, nr); err != nil {
		return fmt.Errorf("rotate root: %w: the new root does not accept itself: %w", ErrBadKeys, err)
	}
	next.Root, next.RootThreshold = nil, 0 // the online keys from here on

	// The targets on offer, signed again under the new root.
	last := latestVersion(md, metadata.TARGETS)
	var targets *metadata.Metadata[metadata.TargetsType]
	if last > 0 {
		prev, err := metadata.Targets().FromFile(filepath.Join(md, fmt.Sprintf("%d.targets.json", last)))
		if err != nil {
			return fmt.Errorf("rotate root: read the last targets: %w", err)
		}
		targets = metadata.Targets(now.Add(opt.TargetsExpiry))
		targets.Signed.Version = last + 1
		targets.Signed.Targets = prev.Signed.Targets
	}

	tmp := filepath.Join(md, ".root.json.new")
	if err := nr.ToFile(tmp, true); err != nil {
		return fmt.Errorf("rotate root: %w", err)
	}
	if err := nr.ToFile(filepath.Join(md, fmt.Sprintf("%d.root.json", nr.Signed.Version)), true); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rotate root: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(md, "root.json")); err != nil {
		return fmt.Errorf("rotate root: %w", err)
	}
	if targets == nil {
		return nil // nothing published yet
	}
	if err := signWrite(targets, next.Targets, filepath.Join(md, fmt.Sprintf("%d.targets.json", targets.Signed.Version))); err != nil {
		return fmt.Errorf("rotate root: %w", err)
	}
	if err := resign(md, next, targets.Signed.Version, now, opt); err != nil {
		return fmt.Errorf("rotate root: %w", err)
	}
	return nil
}
