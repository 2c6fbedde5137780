package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"idlepool/coord/api"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/store"
)

// This file carries the owner's signed profile (identity.Profile: a
// display name and a link, `idlepool owner set-name`) to the pools: the
// client sends it whenever it registers, and a running agent registers
// again when it changed, so that the pools show the new name.

// OwnerProfilePath is where the owner's signed profile is kept under
// dirs: identity.ProfileFile in the config directory, beside the keys.
func OwnerProfilePath(dirs home.Dirs) string { return filepath.Join(dirs.Config, identity.ProfileFile) }

// LoadOwnerProfile reads the profile of owner kept under dirs. It returns
// nil and no error when there is none; an error matching
// identity.ErrBadProfile when the file does not verify or is another
// owner's (a profile copied without its owner key).
func LoadOwnerProfile(dirs home.Dirs, owner string) (*identity.Profile, error) {
	p, err := identity.LoadProfile(OwnerProfilePath(dirs), owner)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return p, err
}

// profileSource is where a Client reads the owner's profile it sends.
type profileSource struct {
	dirs *home.Dirs   // nil: send none
	log  *slog.Logger // told once about a profile that cannot be sent
	sent time.Time    // Issued of the profile last sent; zero: none
	bad  string       // the last problem logged, not logged again
}

// UseOwnerProfile makes Register send the owner's profile kept under dirs
// (LoadOwnerProfile), read again at every registration. A profile that
// does not verify is not sent; log is told why, once.
func (c *Client) UseOwnerProfile(dirs home.Dirs, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c.mu.Lock()
	c.profile = profileSource{dirs: &dirs, log: log}
	c.mu.Unlock()
}

// ownerProfile is the profile of owner to send, or nil.
func (c *Client) ownerProfile(owner *identity.Key) *identity.Profile {
	c.mu.Lock()
	src := c.profile
	c.mu.Unlock()
	if src.dirs == nil {
		return nil
	}
	p, err := LoadOwnerProfile(*src.dirs, owner.ID())
	if err != nil {
		c.mu.Lock()
		if c.profile.bad != err.Error() {
			c.profile.bad = err.Error()
			src.log.Warn("The owner profile is not sent to the pool", "err", err)
		}
		c.mu.Unlock()
		return nil
	}
	return p
}

// sentProfile records that p (nil: none) was sent with a registration.
func (c *Client) sentProfile(p *identity.Profile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.profile.sent = time.Time{}
	if p != nil {
		c.profile.sent = p.Issued
	}
}

// profileChanged reports whether the owner's profile kept on disk is
// newer than the one the last registration sent.
func (c *Client) profileChanged(owner *identity.Key) bool {
	c.mu.Lock()
	src := c.profile
	c.mu.Unlock()
	if src.dirs == nil {
		return false
	}
	p, err := LoadOwnerProfile(*src.dirs, owner.ID())
	return err == nil && p != nil && p.Issued.After(src.sent)
}

// refreshProfile registers the device again when the owner's profile
// changed since it last registered, so that the pool shows the new one.
func (a *Agent) refreshProfile(ctx context.Context) {
	if !a.c.profileChanged(a.cfg.OwnerKey) {
		return
	}
	if _, err := a.c.Register(ctx, a.cfg.OwnerKey, a.cfg.Name, a.cfg.Invite); err != nil {
		a.log.Warn("Cannot send the new owner profile to the pool; trying again later", "err", fmt.Errorf("register: %w", err))
		return
	}
	a.log.Info("Owner profile sent to the pool")
}

// JobInfo fetches a job's progress with its owner's signed profile, as
// the pool serves it (GET /v1/jobs/{id}); check the profile with
// offers.OwnerName before showing it.
func (c *Client) JobInfo(ctx context.Context, id job.ID) (api.JobInfo, error) {
	var st api.JobInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id.String(), nil, nil, true, &st)
	return st, err
}

// jobNoter is what the agent's Store offers to remember the jobs it
// computed, for its history (*store.Local does).
type jobNoter interface {
	NoteJob(ctx context.Context, n store.JobNote) error
}

// transferNoter is what the agent's Store offers to remember what this
// device fetched of each job's files, by path, for its history
// (*store.Local does).
type transferNoter interface {
	NoteTransfer(ctx context.Context, id job.ID, poolURL string, t pool.Transfer) error
}

// noteTransfer keeps t, bytes of job id's files fetched, in the store
// when it can take them (transferNoter); a failure is only logged: the
// coordinator's report is the one the pool counts.
func (a *Agent) noteTransfer(id job.ID, t pool.Transfer) {
	n, ok := a.cfg.Store.(transferNoter)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.NoteTransfer(ctx, id, a.c.URL(), t); err != nil {
		a.log.Debug("Cannot note the transfer for the history", "jobID", id.String(), "err", err)
	}
}

// ownerShown is the display name and link of a job's owner, from the
// owner's verified profile; "" when it gave none.
type ownerShown struct{ name, link string }

// noteOwnerName remembers the display name and link of job id's owner;
// a.mu must be held.
func (a *Agent) noteOwnerName(id job.ID, name, link string) {
	if a.ownerNames == nil {
		a.ownerNames = map[job.ID]ownerShown{}
	}
	a.ownerNames[id] = ownerShown{name, link}
}

// noteJob returns the owner ID and display name of job j (asking the pool
// once per job) and, the first time this agent meets j, records what the
// history shows of it in the store: its name, description and link, its
// owner and the owner's name. A store that cannot take it is only logged:
// the history then shows the job's ID.
func (a *Agent) noteJob(ctx context.Context, j *job.Job) (owner, ownerName string) {
	owner = a.jobOwner(ctx, j.ID)
	a.mu.Lock()
	shown := a.ownerNames[j.ID]
	ownerName = shown.name
	_, seen := a.notedJobs[j.ID]
	first := !seen
	if a.notedJobs == nil {
		a.notedJobs = map[job.ID]string{}
	}
	a.notedJobs[j.ID] = j.Manifest.Name
	a.mu.Unlock()
	if n, ok := a.cfg.Store.(jobNoter); ok && first {
		m := j.Manifest
		err := n.NoteJob(ctx, store.JobNote{Job: j.ID, Pool: a.c.URL(), Name: m.Name, Description: m.Description, Link: m.Link,
			Owner: owner, OwnerName: ownerName, OwnerLink: shown.link})
		if err != nil {
			a.log.Debug("Cannot note the job for the history", "jobID", j.ID.String(), "err", err)
		}
	}
	return owner, ownerName
}

// jobWords names job id in the event log: "pi (659b95a52b0f)" when this
// agent ran a task of it, else its short ID.
func (a *Agent) jobWords(id job.ID) string {
	a.mu.Lock()
	name := a.notedJobs[id]
	a.mu.Unlock()
	if name == "" {
		return shortJob(id.String())
	}
	return name + " (" + shortJob(id.String()) + ")"
}

// profileUnknown reports whether err is a coordinator's refusal of a
// registration's "profile" field as unknown: one from before owner
// profiles, which decodes bodies strictly.
func profileUnknown(err error) bool {
	ae, ok := errors.AsType[*APIError](err)
	return ok && ae.Status == http.StatusBadRequest && ae.Code != "bad_profile" &&
		strings.Contains(ae.Message, "unknown field") && strings.Contains(ae.Message, `"profile"`)
}
