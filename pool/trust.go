package pool

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"idlepool/job"
)

// TrustConfig holds the operator's rules on trust and sanctions
// (SchedulerConfig.Trust). The zero value has the defaults below and no
// trusted owners.
type TrustConfig struct {
	// TrustedOwners are owner IDs established from the start (the
	// operator's own devices, a lab's members). While at least one owner
	// is established, a task is accepted only when an established owner is
	// among the agreeing voters, so owners that cost nothing to create
	// cannot form a quorum among themselves. Empty: no owner is
	// established and the rule is off (every owner counts alike).
	TrustedOwners []string
	// EstablishAfter is how many tasks an owner's devices must agree on
	// with an established owner before the owner is established too;
	// default DefaultEstablishAfter. Those tasks are its admission: their
	// receipts carry cost 0. A deviation of a device of an owner that
	// earned its standing (not one named here) takes the standing away:
	// the owner pays its admission again.
	EstablishAfter int
	// ExcludeAfter deviations of one device within ExcludeFor exclude the
	// device and every device of its owner from computing in the pool for
	// ExcludeFor; default DefaultExcludeAfter.
	ExcludeAfter int
	// ExcludeFor is how long an exclusion lasts, and the window in which
	// deviations are counted; default DefaultExcludeFor.
	ExcludeFor time.Duration
	// MaxUnverified bounds how many replicas of other owners' jobs a
	// device without a record holds at once (leased, or returned and not
	// yet decided); each result of the device that others agreed with
	// raises its bound by one. Its owner's own jobs ("owner"
	// participants) are not bounded. Default DefaultMaxUnverified.
	MaxUnverified int
	// Secret keys the choice of spot checks (HMAC-SHA256 over the job,
	// task and device); 32 random bytes when empty. Peers never see it.
	Secret []byte
}

// Defaults of TrustConfig.
const (
	DefaultEstablishAfter = 20
	DefaultExcludeAfter   = 3
	DefaultExcludeFor     = 24 * time.Hour
	DefaultMaxUnverified  = 8
)

func (c *TrustConfig) setDefaults() {
	if c.EstablishAfter <= 0 {
		c.EstablishAfter = DefaultEstablishAfter
	}
	if c.ExcludeAfter <= 0 {
		c.ExcludeAfter = DefaultExcludeAfter
	}
	if c.ExcludeFor <= 0 {
		c.ExcludeFor = DefaultExcludeFor
	}
	if c.MaxUnverified <= 0 {
		c.MaxUnverified = DefaultMaxUnverified
	}
	if len(c.Secret) == 0 {
		c.Secret = make([]byte, 32)
		rand.Read(c.Secret) // never fails (crypto/rand)
	}
}

// trustState is what the scheduler knows of its devices' and owners'
// records. Records are stored with every change and restored after a
// restart (trust_store.go); held results are not (their replicas come
// back open, each checked by one more replica). s.mu guards it.
type trustState struct {
	cfg     TrustConfig
	devices map[string]*deviceTrust
	owners  map[string]*ownerTrust
	held    deadlineHeap      // held provisional replicas by check-window end; stale items skipped
	orders  int64             // last replica.order handed out
	active  bool              // some owner is established: the newcomer rule applies
	asks    int64             // requests for work answered (check.go)
	bars    int64             // deviations so far: owners barred from settling (stall.go)
	checks  checkHeap         // checks waiting for their delay; stale items skipped (check.go)
	pairs   map[[2]string]int // agreements between two owners, by pairKey (check.go); in memory only
}

// deviceTrust is one device's record.
type deviceTrust struct {
	streak      map[job.Digest]int // consecutive agreed, checked results per program
	agreed      int                // agreed results since its last deviation
	outstanding int                // replicas leased or returned and undecided
	held        []*replica         // provisional replicas waiting for a later check
	deviations  []time.Time        // within ExcludeFor
	excluded    time.Time          // excluded until
	owner       string             // its owner, once it asked for work
	asked       time.Time          // when it last asked for work
	splits      int                // stalls it lost since its last right known answer (stall.go)
	version     int64              // of its stored record (trust_store.go)
}

// ownerTrust is one owner's record.
type ownerTrust struct {
	endorsed    int // tasks agreed on with an established owner
	established bool
	operator    bool // named in TrustConfig.TrustedOwners
	excluded    time.Time
	usage       decayed // cost of replicas leased for the owner's jobs
	contributed decayed // cost of receipts the owner's devices earned
	version     int64   // of its stored record (trust_store.go)
}

func newTrustState(cfg TrustConfig) *trustState {
	cfg.setDefaults()
	t := &trustState{cfg: cfg, devices: map[string]*deviceTrust{}, owners: map[string]*ownerTrust{}}
	for _, o := range cfg.TrustedOwners {
		t.owner(o).established = true
		t.owner(o).operator = true
		t.active = true
	}
	return t
}

func (t *trustState) device(id string) *deviceTrust {
	d := t.devices[id]
	if d == nil {
		d = &deviceTrust{streak: map[job.Digest]int{}}
		t.devices[id] = d
	}
	return d
}

func (t *trustState) owner(id string) *ownerTrust {
	o := t.owners[id]
	if o == nil {
		o = &ownerTrust{}
		t.owners[id] = o
	}
	return o
}

// established reports whether owner counts as established; true for
// everyone while the newcomer rule is off.
func (t *trustState) established(owner string) bool {
	return !t.active || t.owner(owner).established
}

// excludedUntil returns when p's exclusion (its own or its owner's) ends,
// or the zero time when p is not excluded at now.
func (t *trustState) excludedUntil(p Peer, now time.Time) time.Time {
	until := t.device(p.ID).excluded
	if o := t.owner(p.Owner).excluded; o.After(until) {
		until = o
	}
	if until.After(now) {
		return until
	}
	return time.Time{}
}

// room is how many more replicas device id may hold now.
func (t *trustState) room(id string) int {
	d := t.device(id)
	return t.cfg.MaxUnverified + d.agreed - d.outstanding
}

// roomMode is what a device may be leased of other owners' jobs, by its
// room (trustState.roomFor).
type roomMode int

const (
	roomAny    roomMode = iota // any replica
	roomChecks                 // only a check of a returned result (jobState.checksReturned)
	roomNone                   // nothing
)

// roomFor returns what a device with room (trustState.room, less what
// this request was leased so far) may be leased: anything while room is
// left; then checks of results other owners returned, up to MaxUnverified
// more. Checks are let beyond the bound because a device's own results
// wait for other devices' checks: two devices whose rooms their own
// results used up, the device that held the checks of both gone, were
// otherwise never leased anything again, and their job waited for good.
// A check cannot take a job over: it is compared with the result it
// checks as soon as it is back.
func (t *trustState) roomFor(room int) roomMode {
	switch {
	case room > 0:
		return roomAny
	case room > -t.cfg.MaxUnverified:
		return roomChecks
	}
	return roomNone
}

// trusted reports whether p computes js's tasks alone when not spot
// checked: the job allows it, p has a streak of TrustAfter agreed results
// of the job's program, and p's owner is established.
func (t *trustState) trusted(js *jobState, p Peer) bool {
	return js.adaptive() && t.device(p.ID).streak[js.j.Program.SHA256] >= js.ver.TrustAfter && t.established(p.Owner)
}

// spotCheck reports whether task i of job id is checked when leased to
// device peer: HMAC-SHA256(secret, "idlepool/spot-check/v1", job, task,
// peer) read as a number in [0, 1) is below p. The peer cannot compute it,
// so it cannot tell a checked task from one it computes alone.
func (t *trustState) spotCheck(id job.ID, i int64, peer string, p float64) bool {
	m := hmac.New(sha256.New, t.cfg.Secret)
	m.Write([]byte("idlepool/spot-check/v1\x00"))
	m.Write(id[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	m.Write(b[:])
	m.Write([]byte(peer))
	x := binary.BigEndian.Uint64(m.Sum(nil)[:8]) >> 11 // 53 bits
	return float64(x)/(1<<53) < p
}

// adaptive reports whether the job lets trusted devices compute alone.
func (js *jobState) adaptive() bool { return js.j.Manifest.Adaptive() }

// Provisional states of a task's replica computed alone (taskState.provMode).
const (
	provHeld   = iota + 1 // accepted alone, held back from the merge until a later check of its device passes
	provOpen              // its check window closed unchecked: it votes, and one more agreeing replica decides the task
	provCaught            // its device was caught deviating: it does not vote; the task is computed again
)

// ReplicaProvisional is the state of a replica that computed its task
// alone (adaptive replication) and earned its receipt, while its result
// is held back from the merge until its check window closes.
const ReplicaProvisional = "provisional"

// KindRevocation is the ledger entry that revokes an earlier receipt: the
// replica that earned it computed its task alone and was found wrong after
// the fact. Lease names the revoked receipt's lease, Cost the units
// withdrawn, Reason why.
const KindRevocation = "revocation"

// unclaim ends r's claim on its device's room, once; s.mu is held.
func (s *Scheduler) unclaim(r *replica) {
	if r.counted {
		r.counted = false
		s.trust.device(r.rec.Peer).outstanding--
	}
}

// provisional accepts ts on lead, the one replica a trusted device
// computed alone: it earns its receipt now, and its result is held back
// from the merge until a later check of its device passes (release), its
// check window closes, or its device is caught (catch). s.mu is held.
func (s *Scheduler) provisional(js *jobState, ts *taskState, lead *replica) {
	now := s.now()
	ts.prov, ts.provMode = lead, provHeld
	lead.rec.State = ReplicaProvisional
	s.unclaim(lead)
	s.putReplica(lead)
	// Its count is its device's alone, like its result: both are checked
	// when the task is computed again (a count other than the others'
	// deviates, and the receipt is revoked).
	cost, work := 0.0, uint64(0)
	if !lead.rec.Failed {
		cost, work = provisionalCost(js, ts.index, lead)
	}
	if !js.ownerOnly() {
		s.appendEntry(Entry{Kind: KindReceipt, Pool: s.cfg.Pool, Job: js.rec.ID, Task: ts.index, Peer: lead.rec.Peer,
			Owner: lead.rec.Owner, Lease: lead.rec.Lease, Digest: lead.rec.Digest, Cost: cost, Work: work, Time: now.UnixMilli(),
			Reason: "computed alone by a trusted device; held back from the merge until its check window closes"})
		s.trust.owner(lead.rec.Owner).contributed.add(cost, now)
	}
	lead.cost = cost
	d := s.trust.device(lead.rec.Peer)
	d.held = append(d.held, lead)
	js.held++
	js.touch()
	s.trust.held.push(deadlineItem{now.Add(js.ver.CheckWindow.Duration), lead})
	js.update(ts)
	s.log.Debug("Task accepted alone, held for its check window", "job", js.rec.ID.String(), "task", ts.index, "peer", lead.rec.Peer)
}

// reopen ends the hold of provisional replica r in mode (provOpen or
// provCaught): its task wants replicas again. s.mu is held.
func (s *Scheduler) reopen(r *replica, mode int) {
	ts := r.ts
	if ts == nil || ts.prov != r || ts.provMode != provHeld {
		return
	}
	ts.provMode = mode
	r.js.held--
	r.js.touch()
	d := s.trust.device(r.rec.Peer)
	d.held = slices.DeleteFunc(d.held, func(x *replica) bool { return x == r })
	r.js.update(ts)
	// Its next replicas are checks (check.go): drawn, not handed to
	// whoever asks next, where the device's friends may be waiting.
	s.makeCheck(ts, r.rec.Peer, false)
	s.scheduleCheck(r.js, ts)
}

// release decides the held tasks of device peer that it was leased
// before check (a replica of a checked task it agreed on): a later check
// passed, so their results go to the merge. s.mu is held.
func (s *Scheduler) release(peer string, check *replica) {
	d := s.trust.device(peer)
	var keep []*replica
	for _, r := range d.held {
		if r.ts == nil || r.ts.prov != r || r.ts.provMode != provHeld {
			continue // decided or reopened meanwhile
		}
		if r.order >= check.order {
			keep = append(keep, r)
			continue
		}
		ts, js := r.ts, r.js
		ts.provMode = 0
		js.held--
		js.touch()
		status := OutcomeOK
		if r.rec.Failed {
			status = OutcomeFailed
		}
		s.decide(js, ts, status, r, 1, 1)
	}
	d.held = keep
}

// catch marks every held result of device peer as suspect: each of its
// tasks is computed again by others without its vote, and where they
// disagree its receipt is revoked (decide). s.mu is held.
func (s *Scheduler) catch(peer string) {
	d := s.trust.device(peer)
	for _, r := range slices.Clone(d.held) {
		s.reopen(r, provCaught)
	}
	if n := len(d.held); n > 0 {
		d.held = nil
	}
}

// closeWindows reopens the held results whose check window has closed,
// and those of jobs with no fresh task left (no later check can come from
// them soon): each needs one more agreeing replica. s.mu is held.
func (s *Scheduler) closeWindows(now time.Time) {
	for len(s.trust.held) > 0 && !s.trust.held[0].at.After(now) {
		it := s.trust.held.pop()
		s.reopen(it.r, provOpen)
	}
}

// closeJobWindows reopens js's held results once js has no fresh task
// left. s.mu is held.
func (s *Scheduler) closeJobWindows(js *jobState) {
	if js.held == 0 || js.next < js.tasks {
		return
	}
	for _, ts := range js.active {
		if ts.prov != nil && ts.provMode == provHeld {
			s.reopen(ts.prov, provOpen)
		}
	}
}

// deviated records a deviation of r's device: its streaks end, its held
// results become suspect, and at ExcludeAfter deviations within ExcludeFor
// the device and its owner are excluded; SchedulerConfig.OnDeviate is
// told once it is committed. s.mu is held.
func (s *Scheduler) deviated(r *replica, now time.Time) {
	if r.js.deviators == nil {
		r.js.deviators = map[string]bool{}
	}
	s.trust.bars++
	r.js.deviators[r.rec.Owner] = true
	s.sanction(r.rec.Peer, r.rec.Owner, now)
	if f := s.cfg.OnDeviate; f != nil {
		dv := Deviation{Device: r.rec.Peer, Owner: r.rec.Owner, At: time.UnixMilli(now.UnixMilli())}
		p := s.pend
		p.after = append(p.after, func() { f(dv) })
	}
}

// sanction is what a deviation of device peer of owner at costs them,
// wherever it was decided (deviated, Deviated): the device's streaks end
// and its held results become suspect, its owner loses its standing, and
// at ExcludeAfter deviations within ExcludeFor the device and its owner
// are excluded. s.mu is held.
func (s *Scheduler) sanction(peer, owner string, at time.Time) {
	d := s.trust.device(peer)
	clear(d.streak)
	d.agreed = 0
	d.owner = owner
	s.trustChanged(TrustDevice, peer)
	s.catch(peer)
	// Standing earned is standing lost: the owner pays its admission
	// again (an owner the operator named keeps it).
	if o := s.trust.owner(owner); s.trust.active && o.established && !o.operator {
		o.established, o.endorsed = false, 0
		s.trustChanged(TrustOwner, owner)
		s.log.Warn("Owner lost its standing after a deviation", "owner", owner, "peer", peer)
	}
	cut := at.Add(-s.trust.cfg.ExcludeFor)
	d.deviations = slices.DeleteFunc(d.deviations, func(t time.Time) bool { return !t.After(cut) })
	d.deviations = append(d.deviations, at)
	if len(d.deviations) >= s.trust.cfg.ExcludeAfter {
		until := at.Add(s.trust.cfg.ExcludeFor)
		// Only a longer exclusion is handed on: its devices' replicas
		// decided since may repeat it to the millisecond.
		o := s.trust.owner(owner)
		longer := until.After(d.excluded) || until.After(o.excluded)
		// An exclusion is never shortened: one in force may end later (an
		// exclusion handed over, or a deviation decided elsewhere counted
		// after a later one here).
		d.excluded = latest(d.excluded, until)
		o.excluded = latest(o.excluded, until)
		s.trustChanged(TrustOwner, owner)
		d.deviations = nil
		s.log.Warn("Device and owner excluded after repeated deviations", "peer", peer, "owner", owner,
			"deviations", s.trust.cfg.ExcludeAfter, "until", until.UTC().Format(time.RFC3339))
		if f := s.cfg.OnExclude; f != nil && longer {
			e := Exclusion{Device: peer, Owner: owner, Until: until,
				Reason: fmt.Sprintf("%d deviations within %s", s.trust.cfg.ExcludeAfter, s.trust.cfg.ExcludeFor)}
			p := s.pend
			p.after = append(p.after, func() { f(e) })
		}
		// Its votes on undecided tasks, and its owner's, no longer count
		// (stall.go): the others decide those tasks.
		s.voidOwner(owner)
	}
}

// agreedChecked records that r's device agreed on a task others checked:
// its streak grows, held results leased before r are released, and its
// owner gains standing when an established owner agreed too. s.mu is
// held.
func (s *Scheduler) agreedChecked(js *jobState, r *replica, withEstablished bool) {
	d := s.trust.device(r.rec.Peer)
	d.streak[js.j.Program.SHA256]++
	d.agreed++
	d.owner = r.rec.Owner
	s.trustGained(TrustDevice, r.rec.Peer)
	if len(d.held) > 0 {
		s.release(r.rec.Peer, r)
	}
	o := s.trust.owner(r.rec.Owner)
	if withEstablished && !o.established {
		o.endorsed++
		s.trustChanged(TrustOwner, r.rec.Owner)
		if o.endorsed >= s.trust.cfg.EstablishAfter {
			o.established = true
			s.log.Info("Owner established", "owner", r.rec.Owner, "tasks", o.endorsed)
		}
	}
}

// admission says why a receipt of owner earns no cost: while owners
// must earn standing (some owner is established), a new owner's first
// EstablishAfter agreed tasks are its admission, computed for nothing,
// so that standing costs every self-made key that much work. "" when
// its receipts carry their cost. s.mu is held.
func (s *Scheduler) admission(owner string) string {
	t := s.trust
	if !t.active || t.owner(owner).established {
		return ""
	}
	return fmt.Sprintf("admission: a new owner's receipts carry cost once it is established, after %d tasks agreed with established owners (this is one of them; %d before it)",
		t.cfg.EstablishAfter, t.owner(owner).endorsed)
}

// ExcludedError says that a device, or its owner, is excluded from
// computing in the pool after repeated deviations, and until when. It
// matches ErrExcluded.
type ExcludedError struct {
	Peer  string
	Until time.Time
}

// Error says who is excluded and until when.
func (e *ExcludedError) Error() string {
	return fmt.Sprintf("pool: device %s is excluded from computing until %s: it or another device of its owner returned results other owners disagreed with %s",
		e.Peer, e.Until.UTC().Format(time.RFC3339), "repeatedly")
}

// Is matches ErrExcluded.
func (e *ExcludedError) Is(target error) bool { return target == ErrExcluded }

// revoke appends the entry that revokes the receipt provisional replica r
// earned, now that its task, computed again, agreed on other bytes. s.mu
// is held.
func (s *Scheduler) revoke(js *jobState, ts *taskState, r *replica, at time.Time) {
	cost := r.cost
	if cost == 0 && !r.rec.Failed {
		cost, _ = provisionalCost(js, ts.index, r) // after a restart
	}
	s.appendEntry(Entry{Kind: KindRevocation, Pool: s.cfg.Pool, Job: js.rec.ID, Task: ts.index, Peer: r.rec.Peer,
		Owner: r.rec.Owner, Lease: r.rec.Lease, Digest: r.rec.Digest, Cost: cost, Time: at.UnixMilli(),
		Reason: fmt.Sprintf("revokes the receipt of lease %s: the task, computed alone, was computed again by others and they agreed on other bytes", r.rec.Lease)})
	s.trust.owner(r.rec.Owner).contributed.add(-cost, at)
	s.log.Warn("Receipt revoked", "lease", r.rec.Lease, "job", js.rec.ID.String(), "task", ts.index, "peer", r.rec.Peer, "cost", cost)
}

// quorumOf is the number of agreeing voters ts needs: the job's quorum,
// [verify] min_quorum for a task leased to a trusted device alone, and one
// more whenever the voters disagree, so that a bare majority (a 2-1 after
// a 1-1 split settled by whoever asked next, perhaps the liar's partner)
// never decides a disputed task nor marks anyone deviating.
func (js *jobState) quorumOf(ts *taskState, c, n int) int {
	q := js.pol.Quorum
	if ts.single && ts.prov == nil {
		q = js.ver.MinQuorum
	}
	if n > c {
		q++
	}
	return q
}

// leadEstablished reports whether an established owner is among the
// voters of lead's digest, or the newcomer rule is off for ts.
func (js *jobState) leadEstablished(ts *taskState, lead *replica) bool {
	if lead == nil || !js.trust.active || js.ownerOnly() {
		return true
	}
	for _, r := range ts.returned {
		if js.agrees(r, lead) && js.trust.owner(r.rec.Owner).established && js.votes(ts, r) {
			return true
		}
	}
	return false
}

// admits reports whether the pool's trust rules let p take a replica of
// ts, which already has replicas: a newcomer's device does not join a task
// that only newcomers computed (two new owners never form a quorum
// together), and the device of an owner that deviated in this job joins
// no task another device started.
func (js *jobState) admits(ts *taskState, p Peer) bool {
	if js.ownerOnly() {
		return true
	}
	t := js.trust
	if t.active && !t.owner(p.Owner).established {
		for _, rs := range [2][]*replica{ts.live, ts.returned} {
			for _, r := range rs {
				if t.owner(r.rec.Owner).established {
					return js.settlerOK(ts, p)
				}
			}
		}
		if len(ts.live)+len(ts.returned) > 0 {
			return false
		}
	}
	return js.settlerOK(ts, p)
}

// settlerOK reports whether p may join ts, a task that others have
// started: not when p's owner deviated in this job before. Such an owner's
// devices compute only first replicas, so that they never check, or
// settle a split for, someone they may collude with; and a device barred
// from disputed tasks is not steered toward the undisputed tasks its
// partners started.
func (js *jobState) settlerOK(ts *taskState, p Peer) bool {
	return !js.deviators[p.Owner] || len(ts.live)+len(ts.returned) == 0
}

// unsingle forgets that ts was to be computed alone once it has no
// replica left, so that the next lease chooses again.
func (ts *taskState) unsingle() {
	if ts.single && len(ts.live) == 0 && len(ts.returned) == 0 {
		ts.single = false
	}
}

// connectedWithin is how recently a device must have asked for work to
// count as connected when a job's status says why it cannot progress.
const connectedWithin = 5 * time.Minute

// asked notes that device p asked for work at now. s.mu is held.
func (s *Scheduler) asked(p Peer, now time.Time) {
	d := s.trust.device(p.ID)
	d.owner, d.asked = p.Owner, now
}

// blocked says why js cannot reach its quorum with the devices connected
// now (those that asked for work within connectedWithin, or hold a live
// lease; not excluded), for people: "needs devices of 2 owners to agree
// on each task; 1 other owner's devices are connected". "" when it can,
// or has nothing left to decide.
// s.mu is held.
func (s *Scheduler) blocked(js *jobState, now time.Time) string {
	if js.complete() || !js.rec.Cancelled.IsZero() {
		return ""
	}
	q := js.pol.Quorum
	if js.adaptive() {
		q = js.ver.MinQuorum
	}
	needEstablished := s.trust.active && !js.ownerOnly()
	// It stops at the first q voters (with an established owner among
	// them where one is needed): a pool of many devices is not walked
	// whole, under s.mu, on every status asked (Jobs, GET
	// /v1/jobs/{id}, each scrape of /metrics).
	voters := map[string]bool{}
	established := false
	enough := func() bool { return len(voters) >= q && (established || !needEstablished) }
	consider := func(id, owner string) {
		p := Peer{ID: id, Owner: owner}
		if owner == "" || !js.allows(p) || !s.trust.excludedUntil(p, now).IsZero() {
			return
		}
		if js.ownerOnly() {
			voters[id] = true
		} else {
			voters[owner] = true
		}
		established = established || s.trust.owner(owner).established
	}
	// The devices that asked for work lately, then those that hold a
	// live lease: after a restart or a take-over when a device last
	// asked is not known (it is kept in memory only), and the devices
	// computing the leases the new scheduler restored were otherwise "0
	// connected" until each asked again.
	for id, d := range s.trust.devices {
		if enough() {
			break
		}
		if !d.asked.IsZero() && now.Sub(d.asked) <= connectedWithin {
			consider(id, d.owner)
		}
	}
	for id, sh := range s.shown {
		if enough() {
			break
		}
		if sh.live > 0 {
			consider(id, s.peers[id].Owner)
		}
	}
	switch {
	case len(voters) < q && js.ownerOnly():
		return fmt.Sprintf("needs %d of its owner's devices to agree on each task; %d connected", q, len(voters))
	case len(voters) < q:
		whose := "owners'"
		if len(voters) == 1 {
			whose = "owner's"
		}
		return fmt.Sprintf("needs devices of %d owners to agree on each task; %d other %s devices are connected", q, len(voters), whose)
	case needEstablished && !established:
		return "needs a device of an established owner among those that agree on each task (two new owners never form a quorum together); none is connected"
	}
	return ""
}

// statusOf is js's status, with Trouble saying why it cannot reach its
// quorum when nothing else troubles it. s.mu is held.
func (s *Scheduler) statusOf(js *jobState) JobStatus {
	st := js.status()
	if st.Trouble == "" {
		st.Trouble = s.blocked(js, s.now())
	}
	return st
}

// provisionalCost is what the receipt of provisional replica r of task i
// credits: the work its device counted (job.Job.WorkCost), and that
// count; 0 and 0 when it counted none by this pool's rule.
func provisionalCost(js *jobState, i int64, r *replica) (float64, uint64) {
	if !metered(r.rec.Work) {
		return 0, 0
	}
	return js.j.WorkCostOf(i, r.rec.Work.Count), r.rec.Work.Count
}
