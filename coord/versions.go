package coord

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"idlepool/pool"
	"idlepool/version"
)

// Versions are the versions a pool accepts and knows: MinAgent the
// oldest idlepool ("X.Y.Z", "" for any), MinAPI the oldest API version
// (0 for any), LatestAgent the newest release ("" for unknown). A
// single coordinator takes them from its Config; a clustered pool's
// nodes share one set (ClusterHooks.Versions, cluster.Rules).
type Versions struct {
	MinAgent    string
	MinAPI      int
	LatestAgent string
}

// IsZero reports whether v accepts every version and names no release.
func (v Versions) IsZero() bool { return v == Versions{} }

// versions returns c's Versions.
func (c *Config) versions() Versions {
	return Versions{MinAgent: c.MinAgentVersion, MinAPI: c.MinAPIVersion, LatestAgent: c.LatestAgentVersion}
}

// validateVersions checks the versions of c.
func (c *Config) validateVersions() error { return c.versions().Validate() }

// Validate checks v: versions of the form X.Y.Z, an API version from 0
// to APIVersion, and a latest release not older than the minimum; an
// error wraps ErrConfig and names what is wrong.
func (v Versions) Validate() error {
	for name, s := range map[string]string{"minimum agent version": v.MinAgent, "latest agent version": v.LatestAgent} {
		if s == "" {
			continue
		}
		p, err := version.Parse(s)
		if err != nil || p.IsDev() {
			return fmt.Errorf("%w: %s %q: want X.Y.Z such as 1.4.0", ErrConfig, name, s)
		}
	}
	if v.MinAPI < 0 || v.MinAPI > APIVersion {
		return fmt.Errorf("%w: minimum API version %d: want 0 (any) to %d (this coordinator's)", ErrConfig, v.MinAPI, APIVersion)
	}
	if v.MinAgent != "" && v.LatestAgent != "" {
		minV, _ := version.Parse(v.MinAgent)
		latest, _ := version.Parse(v.LatestAgent)
		if latest.Less(minV) {
			return fmt.Errorf("%w: the latest agent version %s is older than the minimum %s", ErrConfig, latest, minV)
		}
	}
	return nil
}

// versions returns the versions s applies now: the cluster's shared
// ones (ClusterHooks.Versions) in a clustered pool, else its Config's.
func (s *Server) versions() Versions {
	if c := s.cfg.Cluster; c != nil && c.Versions != nil {
		return c.Versions()
	}
	return s.cfg.versions()
}

// checkAgentVersion refuses (426 agent_too_old) a request from a client
// older than the pool accepts (Server.versions): an idlepool version
// below MinAgent (a client that sends none, or a build without a
// version, counts as older), or an API version below MinAPI.
func (s *Server) checkAgentVersion(r *http.Request) error {
	v := s.versions()
	if v.MinAgent != "" {
		minV, _ := version.Parse(v.MinAgent) // checked by Validate
		have, err := version.Parse(r.Header.Get(VersionHeader))
		if err != nil || have.Less(minV) {
			return tooOld(v)
		}
	}
	if v.MinAPI > 0 {
		api, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(APIHeader)))
		if err != nil || api < v.MinAPI {
			return tooOld(v)
		}
	}
	return nil
}

// tooOld is the 426 answer to a client older than v accepts.
func tooOld(v Versions) *apiError {
	msg := "this pool needs a newer idlepool"
	if v.MinAgent != "" {
		p, _ := version.Parse(v.MinAgent)
		msg = "this pool needs idlepool " + p.Short() + " or newer"
	}
	return &apiError{http.StatusUpgradeRequired, CodeAgentTooOld, msg, nil}
}

// legacyLedgerClient reports whether r's client reads ledger entries as
// they were before batchedLedgerAPI: it says it speaks an older API
// version (APIHeader), or, with agent (a request signed by a device),
// says none (an agent from before the header). A client that says none
// on a request anyone may make (curl, a browser, a script) reads them as
// they are.
func legacyLedgerClient(r *http.Request, agent bool) bool {
	h := strings.TrimSpace(r.Header.Get(APIHeader))
	if h == "" {
		return agent
	}
	api, err := strconv.Atoi(h)
	return err == nil && api < batchedLedgerAPI
}

// legacyEntries returns es with each entry signed with its batch
// (pool.Entry.Tree) signed alone instead, without its proof, so that a
// client older than batchedLedgerAPI, which refuses the unknown "tree"
// and checks a signature over the entry itself, verifies it
// (pool.VerifyEntry). Such an entry's Hash is not the next entry's Prev:
// the chain of a whole ledger verifies only as it is stored. It costs a
// signature per entry, for old clients only; es is not changed.
func (s *Server) legacyEntries(es []pool.Entry) []pool.Entry {
	out := make([]pool.Entry, len(es))
	for i, e := range es {
		if e.Tree != nil {
			e.Tree = nil
			e.Sig = s.key.Sign(e.Canonical(false))
		}
		out[i] = e
	}
	return out
}
