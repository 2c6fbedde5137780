package coord

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"idlepool/pool"
	"idlepool/version"
)

// Headers with which a client says what it is: VersionHeader its idlepool
// version ("1.4.0", "dev" for a build not given one), APIHeader the API
// version it speaks (APIVersion of its build). Clients older than these
// headers send neither.
const (
	VersionHeader = "Idlepool-Version"
	APIHeader     = "Idlepool-Api"
)

// CodeAgentTooOld is the code of a 426 answer to a device older than the
// pool accepts (Config.MinAgentVersion, MinAPIVersion); its message says
// so in words ("this pool needs idlepool 1.4 or newer").
const CodeAgentTooOld = "agent_too_old"

// validateVersions checks the versions of c.
func (c *Config) validateVersions() error {
	for name, v := range map[string]string{"minimum agent version": c.MinAgentVersion, "latest agent version": c.LatestAgentVersion} {
		if v == "" {
			continue
		}
		p, err := version.Parse(v)
		if err != nil || p.IsDev() {
			return fmt.Errorf("%w: %s %q: want X.Y.Z such as 1.4.0", ErrConfig, name, v)
		}
	}
	if c.MinAPIVersion < 0 || c.MinAPIVersion > APIVersion {
		return fmt.Errorf("%w: minimum API version %d: want 0 (any) to %d (this coordinator's)", ErrConfig, c.MinAPIVersion, APIVersion)
	}
	if c.MinAgentVersion != "" && c.LatestAgentVersion != "" {
		minV, _ := version.Parse(c.MinAgentVersion)
		latest, _ := version.Parse(c.LatestAgentVersion)
		if latest.Less(minV) {
			return fmt.Errorf("%w: the latest agent version %s is older than the minimum %s", ErrConfig, latest, minV)
		}
	}
	return nil
}

// checkAgentVersion refuses (426 agent_too_old) a request from a client
// older than the pool accepts: an idlepool version below
// MinAgentVersion (a client that sends none, or a build without a
// version, counts as older), or an API version below MinAPIVersion.
func (s *Server) checkAgentVersion(r *http.Request) error {
	if s.cfg.MinAgentVersion != "" {
		minV, _ := version.Parse(s.cfg.MinAgentVersion) // checked by Validate
		have, err := version.Parse(r.Header.Get(VersionHeader))
		if err != nil || have.Less(minV) {
			return s.tooOld()
		}
	}
	if s.cfg.MinAPIVersion > 0 {
		api, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(APIHeader)))
		if err != nil || api < s.cfg.MinAPIVersion {
			return s.tooOld()
		}
	}
	return nil
}

// tooOld is the 426 answer to a client older than the pool accepts.
func (s *Server) tooOld() *apiError {
	msg := "this pool needs a newer idlepool"
	if s.cfg.MinAgentVersion != "" {
		v, _ := version.Parse(s.cfg.MinAgentVersion)
		msg = "this pool needs idlepool " + v.Short() + " or newer"
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
