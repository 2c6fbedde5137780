package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/pool"
)

func cmdLedger(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool ledger", "Usage: idlepool ledger verify (FILE | POOL_URL | --pool URL) [--key KEY]\n\nChecks a pool's receipt ledger end to end: every coordinator signature, the hash chain, and that no entry is missing; in a pool divided into shards, every shard's ledger and the anchors that tie them to one another. A FILE is a download of GET /v1/ledger (JSON Lines).\n\n")
	poolURL := fs.String("pool", "", "download the ledger from the pool at `URL`")
	keyFlag := fs.String("key", "", "the coordinator's public `KEY` (base64); default: the key pinned when this device met the pool, else the pool's own answer")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] != "verify" || len(pos) > 2 || (len(pos) == 2) == (*poolURL != "") {
		fs.Usage()
		return &userError{Msg: "ledger verify needs one ledger file or pool URL", Hint: "idlepool ledger verify http://127.0.0.1:7420", Cause: errUsage}
	}
	src := *poolURL
	if len(pos) == 2 {
		src = pos[1]
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	var key ed25519.PublicKey
	if *keyFlag != "" {
		if key, err = identity.ParsePublic(*keyFlag); err != nil {
			return &userError{Msg: "--key: " + err.Error(), Cause: errors.Join(err, errUsage)}
		}
	}
	var entries []pool.Entry
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		anon, err := identity.Generate() // the ledger is public: nothing is signed
		if err != nil {
			return err
		}
		c, err := agent.NewClient(src, anon, nil)
		if err != nil {
			return poolError(err, src, dirs)
		}
		waitOutTakeOvers(g, c, src, takeOverWait)
		info, err := agent.PoolKey(ctx, c, dirs.Config)
		if err != nil {
			return poolError(err, src, dirs)
		}
		if key == nil {
			key = info.Key
		}
		if info.Shards > 1 {
			// Each shard keeps a ledger of its own, signed with the
			// pool's key, and anchors the others': every one is checked.
			sl, err := agent.VerifyShardLedgers(ctx, c, info.Shards, key)
			if err != nil {
				if errors.Is(err, pool.ErrLedger) {
					return &userError{Msg: err.Error(), Cause: err}
				}
				return poolError(err, src, dirs)
			}
			return printShardLedgers(g, sl)
		}
		if entries, err = agent.DownloadLedger(ctx, c, -1, 0); err != nil {
			return poolError(err, src, dirs)
		}
	} else {
		f, err := os.Open(src)
		if err != nil {
			return &userError{Msg: err.Error(), Hint: "give a ledger file (GET /v1/ledger, JSON Lines) or a pool URL", Cause: err}
		}
		entries, err = agent.ReadLedger(f)
		f.Close()
		if err != nil {
			return &userError{Msg: fmt.Sprintf("ledger does not verify: %s: %v", src, err), Cause: err}
		}
		if key == nil && len(entries) > 0 {
			if key = pinnedKeyOf(dirs.Config, entries[0].Pool); key == nil {
				return &userError{Msg: fmt.Sprintf("no key known for pool %q", entries[0].Pool),
					Hint: "give the coordinator's key with --key (GET /v1/pool shows it), or verify against the pool's URL", Cause: errUsage}
			}
		}
	}
	if err := pool.VerifyLedger(entries, key); err != nil {
		return &userError{Msg: err.Error(), Cause: err}
	}
	var head string
	if len(entries) > 0 {
		head = entries[len(entries)-1].Hash().String()
	} else {
		head = "(empty)"
	}
	fmt.Fprintf(g.stdout, "ledger ok: %s, head %s\n", entriesText(len(entries)), head)
	return nil
}

// printShardLedgers prints one line for the ledgers of a divided pool's
// shards, checked by agent.VerifyShardLedgers: their entries and anchors
// in all, and every shard's count of entries and anchors and its head.
func printShardLedgers(g *globals, sl *agent.ShardLedgers) error {
	total, tied := 0, 0
	var heads []string
	for s, entries := range sl.Chains {
		head := "(empty)"
		if len(entries) > 0 {
			head = entries[len(entries)-1].Hash().String()
		}
		heads = append(heads, fmt.Sprintf("shard %d: %s, %s, head %s", s, entriesText(len(entries)), anchorsText(sl.Anchors[s]), head))
		total += len(entries)
		tied += sl.Anchors[s]
	}
	fmt.Fprintf(g.stdout, "ledger ok: %s in %d shards, tied by %s (%s)\n", entriesText(total), len(sl.Chains), anchorsText(tied), strings.Join(heads, "; "))
	return nil
}

// anchorsText says "1 anchor", "2 anchors".
func anchorsText(n int) string {
	if n == 1 {
		return "1 anchor"
	}
	return fmt.Sprintf("%d anchors", n)
}

// pinnedKeyOf returns the coordinator key pinned for the pool named name,
// if this device met exactly one pool of that name.
func pinnedKeyOf(configDir, name string) ed25519.PublicKey {
	files, _ := filepath.Glob(filepath.Join(configDir, "pools", "*.json"))
	var found ed25519.PublicKey
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var p struct {
			Pool string `json:"pool"`
			Key  []byte `json:"key"`
		}
		if json.Unmarshal(b, &p) != nil || p.Pool != name || len(p.Key) != ed25519.PublicKeySize {
			continue
		}
		if found != nil && !found.Equal(ed25519.PublicKey(p.Key)) {
			return nil // two pools of that name: ambiguous
		}
		found = p.Key
	}
	return found
}

// entriesText says "1 entry", "2 entries".
func entriesText(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}
