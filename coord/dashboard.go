package coord

import (
	"cmp"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"idlepool/assets"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/web"
)

// The pool's page: a read-only dashboard at GET / (web/pool.html and its
// script and style, embedded), fed by GET /v1/dashboard. Neither needs an
// account. They show what the pool's public ledger and job board already
// tell, summed up: jobs and how far their tasks are, the devices (by ID,
// their owner, native or browser, their offer's coarse state, how many
// tasks they hold and whether their fetches went direct or through the
// relay), receipts per owner, and the ledger's head, with the command
// that checks it. Never a
// result, a key, a device's name, which program a device runs, or
// anything a donor did at their machine (DESIGN.md invariant 19).

// Limits of the dashboard.
const (
	// DashboardMaxTaskStates is the most tasks per job whose states
	// GET /v1/dashboard lists; a larger job shows its counts only.
	DashboardMaxTaskStates = 4096
	// dashboardMaxJobs is the most jobs listed, newest first.
	dashboardMaxJobs = 50
	// dashboardMaxPeers is the most devices listed.
	dashboardMaxPeers = 500
	// dashboardMaxOwners is the most owners listed, most receipts first.
	dashboardMaxOwners = 200
)

// pageCSP is the Content-Security-Policy of the pool's page and its
// files: everything from the coordinator itself, no inline script or
// style, no framing, no forms. 'wasm-unsafe-eval' lets a page of the
// pool compile WebAssembly (web/wasi.js), and nothing else.
const pageCSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Dashboard is the body of GET /v1/dashboard.
type Dashboard struct {
	Pool string `json:"pool"`
	// Key is the coordinator's public key (identity.EncodePublic), which
	// signs every ledger entry.
	Key    string           `json:"key"`
	Jobs   []DashboardJob   `json:"jobs"`
	Peers  []DashboardPeer  `json:"peers"`
	Owners []DashboardOwner `json:"owners"`
	Ledger DashboardLedger  `json:"ledger"`
	// Unanswered lists, in a pool divided into shards, the shards whose
	// coordinator did not answer the node that merged this dashboard (a
	// take-over or hand-over under way), by shard: their jobs, devices,
	// receipts and ledger entries are missing from it. Absent when every
	// shard answered.
	Unanswered []DashboardShard `json:"unanswered,omitempty"`
}

// DashboardShard is a shard of a divided pool missing from a Dashboard,
// and why: "no coordinator is in charge of it right now" (it did not
// answer, or answered 503), or the status it answered.
type DashboardShard struct {
	Shard  int    `json:"shard"`
	Reason string `json:"reason"`
}

// DashboardJob is one job's progress. States has one byte per task, for
// the first DashboardMaxTaskStates tasks (pool.TaskStates: '.' queued,
// 'l' leased, 'r' returned and waiting for its quorum, 'd' done, 'f'
// failed); "" when the pool no longer holds the job's tasks.
type DashboardJob struct {
	Job       string            `json:"job"`
	Name      string            `json:"name"`
	Owner     string            `json:"owner"`
	Tasks     int64             `json:"tasks"`
	Accepted  int64             `json:"accepted"`
	Failed    int64             `json:"failed"`
	Leased    int64             `json:"leased"`
	Waiting   int64             `json:"waiting"`
	Complete  bool              `json:"complete"`
	Cancelled bool              `json:"cancelled"`
	States    string            `json:"states"`
	Transfer  *pool.JobTransfer `json:"transfer,omitempty"`
	// Shard is the job's shard in a pool divided into shards (its
	// coordinator's Config.Shard); absent in an undivided pool.
	Shard *int `json:"shard,omitempty"`
}

// DashboardPeer is one registered device. Kind is "browser" when it
// registered (or, since this coordinator started, made a signed
// request) from a web browser, "native" for the agent, "" when this
// coordinator has seen neither since it started. State and
// Hold are its capacity offer's coarse state ("" without a live
// offer). Leases is how many tasks it holds leased now: a device whose
// offer says computing but that holds none is ready and waiting for work,
// not busy. Connection is how the bytes it fetched from other devices
// came, as it reported them: "relayed" (some through the relay),
// "direct", "coordinator" (none from devices), "" (nothing reported).
type DashboardPeer struct {
	Peer       string     `json:"peer"`
	Owner      string     `json:"owner"`
	Kind       string     `json:"kind"`
	State      idle.State `json:"state,omitempty"`
	Hold       idle.Hold  `json:"hold,omitempty"`
	Leases     int        `json:"leases,omitempty"`
	Connection string     `json:"connection"`
	// Silent is true when the device made no signed request for more
	// than DashboardSilentAfter (or none since the coordinator started):
	// its offer's State may be stale (a closed tab, a machine switched
	// off), and its leases run out as every lease does. A coarse flag,
	// never a time: when a device was last seen is not shown.
	Silent bool `json:"silent,omitempty"`
}

// DashboardSilentAfter is how long a device may make no signed request
// before the pool's page calls it silent: every device asks for leases,
// heartbeats or signals well within it while it runs.
const DashboardSilentAfter = time.Minute

// DashboardOwner sums one owner's receipts in the ledger.
type DashboardOwner struct {
	Owner    string  `json:"owner"`
	Name     string  `json:"name,omitempty"` // from the owner's signed profile
	Receipts int64   `json:"receipts"`
	Cost     float64 `json:"cost"` // planner cost units
}

// DashboardLedger is the ledger's head: its number of entries and the
// hash of the last (pool.Entry.Hash), which `idlepool ledger verify`
// prints after checking every signature and link.
type DashboardLedger struct {
	Entries uint64 `json:"entries"`
	Head    string `json:"head"`
}

// dashboard keeps what the page needs beyond the scheduler's state: the
// kind each device registered as, and the ledger's receipts per owner,
// read on from where the last request stopped. Safe for concurrent use.
type dashboard struct {
	mu     sync.Mutex
	kinds  map[string]string    // peer -> "browser" or "native"
	seen   map[string]time.Time // peer -> its last signed request
	seq    uint64               // ledger entries summed
	head   job.Digest
	owners map[string]*DashboardOwner
}

func newDashboard() *dashboard {
	return &dashboard{kinds: map[string]string{}, seen: map[string]time.Time{}, owners: map[string]*DashboardOwner{}}
}

// noteSeen records that peer made a signed request r at now, and the
// kind of device it is from r when not known yet (noteRegistration):
// a device registers once, and a coordinator that started since (a
// restart, a take-over, another shard's) learns its kind from its
// next request.
func (d *dashboard) noteSeen(peer string, now time.Time, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[peer] = now
	if _, ok := d.kinds[peer]; !ok && len(d.kinds) < 1<<20 {
		d.kinds[peer] = kindOf(r)
	}
}

// kindOf is the kind of device that sent r: "browser" when its
// User-Agent starts with "Mozilla/" (every web browser's does), else
// "native".
func kindOf(r *http.Request) string {
	if strings.HasPrefix(r.UserAgent(), "Mozilla/") {
		return "browser"
	}
	return "native"
}

// silent reports whether peer made no signed request for more than
// DashboardSilentAfter before now (or none since the coordinator
// started). It takes only the dashboard's lock, which is never held while
// calling the Scheduler, so the Scheduler may call it (Present).
func (d *dashboard) silent(peer string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.silentLocked(peer, now)
}

func (d *dashboard) silentLocked(peer string, now time.Time) bool {
	seen, ok := d.seen[peer]
	return !ok || now.Sub(seen) > DashboardSilentAfter
}

// noteRegistration records the kind of device that registered, from its
// request: a web browser's User-Agent starts with "Mozilla/".
func (d *dashboard) noteRegistration(peer string, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.kinds) < 1<<20 {
		d.kinds[peer] = kindOf(r)
	}
}

// catchUp sums the ledger entries after the last one summed.
func (d *dashboard) catchUp(read func(after uint64, max int) ([]pool.Entry, error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		page, err := read(d.seq, ledgerPage)
		if err != nil {
			return err
		}
		for _, e := range page {
			if e.Kind == pool.KindReceipt {
				o := d.owners[e.Owner]
				if o == nil {
					o = &DashboardOwner{Owner: e.Owner}
					d.owners[e.Owner] = o
				}
				o.Receipts++
				o.Cost += e.Cost
			}
			d.seq, d.head = e.Seq, e.Hash()
		}
		if len(page) < ledgerPage {
			return nil
		}
	}
}

// dashboardData is GET /v1/dashboard.
func (s *Server) dashboardData(w http.ResponseWriter, r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	if err := s.dash.catchUp(s.sched.Ledger); err != nil {
		return err
	}
	out := Dashboard{Pool: s.cfg.Pool, Key: identity.EncodePublic(s.key.Public()),
		Jobs: []DashboardJob{}, Peers: []DashboardPeer{}, Owners: []DashboardOwner{}}

	jobs := s.sched.Jobs()
	slices.Reverse(jobs) // newest first
	jobs = jobs[:min(len(jobs), dashboardMaxJobs)]
	for _, st := range jobs {
		states, _ := s.sched.TaskStates(st.Job, DashboardMaxTaskStates) // "" for a job archived meanwhile
		out.Jobs = append(out.Jobs, DashboardJob{Job: st.Job.String(), Name: st.Name, Owner: st.Owner,
			Tasks: st.Tasks, Accepted: st.Accepted, Failed: st.Failed, Leased: st.Leased, Waiting: st.Waiting,
			Complete: st.Complete, Cancelled: st.Cancelled, States: states, Transfer: s.transfers.summary(st.Job)})
		if s.cfg.Shards > 1 {
			out.Jobs[len(out.Jobs)-1].Shard = &s.cfg.Shard
		}
	}

	now := s.cfg.Now()
	live := map[string]DashboardPeer{}
	for _, o := range s.offers.live(now) {
		live[o.Peer] = DashboardPeer{State: o.State, Hold: o.Hold}
	}
	peers := s.sched.Peers() // before the dashboard's lock: Present takes it under the Scheduler's
	leases := s.sched.LiveLeases()
	s.dash.mu.Lock()
	for _, p := range peers {
		if len(out.Peers) == dashboardMaxPeers {
			break
		}
		dp := live[p.ID]
		dp.Peer, dp.Owner, dp.Kind, dp.Leases = p.ID, p.Owner, s.dash.kinds[p.ID], leases[p.ID]
		dp.Connection = connectionWord(s.transfers.device(p.ID))
		dp.Silent = s.dash.silentLocked(p.ID, now)
		out.Peers = append(out.Peers, dp)
	}
	for _, o := range s.dash.owners {
		out.Owners = append(out.Owners, *o)
	}
	out.Ledger = DashboardLedger{Entries: s.dash.seq}
	if s.dash.seq > 0 {
		out.Ledger.Head = s.dash.head.String()
	}
	s.dash.mu.Unlock()
	s.noteAdded(w, len(jobs), func(i int) job.ID { return jobs[i].Job })
	slices.SortFunc(out.Owners, func(a, b DashboardOwner) int {
		return cmp.Or(cmp.Compare(b.Receipts, a.Receipts), cmp.Compare(a.Owner, b.Owner))
	})
	out.Owners = out.Owners[:min(len(out.Owners), dashboardMaxOwners)]
	for i := range out.Owners {
		if p := s.profiles.get(out.Owners[i].Owner); p != nil {
			out.Owners[i].Name = p.Name
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// connectionWord says how a device's fetches from other devices went.
func connectionWord(t pool.Transfer, ok bool) string {
	switch {
	case !ok:
		return ""
	case t.Relayed > 0:
		return "relayed"
	case t.Direct > 0:
		return "direct"
	default:
		return "coordinator"
	}
}

// pageFiles are the pool's page and its files, by URL path.
var pageFiles = map[string]struct{ name, typ string }{
	"/":             {"pool.html", "text/html; charset=utf-8"},
	"/web/pool.js":  {"pool.js", "text/javascript; charset=utf-8"},
	"/web/pool.css": {"pool.css", "text/css; charset=utf-8"},
	"/web/wasi.js":  {"wasi.js", "text/javascript; charset=utf-8"},
	"/web/icon.png": {"", "image/png"}, // the app's icon (assets.AppPNG)
}

// servePage answers one of pageFiles, with the page's strict
// Content-Security-Policy.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request) error {
	f, ok := pageFiles[r.URL.Path]
	if !ok {
		return notFound("not_found", "no such file: %s", r.URL.Path)
	}
	return writePageFile(w, f.name, f.typ)
}

// writePageFile writes the page's file name (of web.Files; "" for the
// app's icon) of type typ, with the page's headers.
func writePageFile(w http.ResponseWriter, name, typ string) error {
	b := assets.AppPNG
	if name != "" {
		var err error
		if b, err = fs.ReadFile(web.Files, name); err != nil {
			return err
		}
	}
	h := w.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Content-Type", typ)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
	return nil
}
