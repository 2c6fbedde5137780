package pool_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// The simulation measures what verification costs and lets through: the
// real Scheduler (MemStore, signed ledger), simulated peers and no
// WebAssembly. Peers ask for work one at a time in a random order (a
// seeded generator, so a run repeats exactly) and answer at once; an
// honest peer returns the task's true result, a liar a wrong one: the same
// wrong bytes as every other liar (colluding) or its own (independent),
// from its first task (steady) or after PatientAfter honest ones
// (patient). Liars are whole owners: every device of a lying owner lies.
//
// `make sim` runs the full size (1,000 peers of 200 owners, 10^5 tasks)
// and prints the table of docs/benchmarks.md; TestSimulationSmall runs a
// small one.

var (
	simFull  = flag.Bool("sim.full", false, "run the full-size simulation (1,000 peers of 200 owners) and print the table")
	simTasks = flag.Int64("sim.tasks", 100_000, "tasks per row of the full-size simulation")
	simRows  = flag.String("sim.rows", "", "comma-separated row numbers (1..) of the full-size simulation to run; empty: all")
)

// simConfig is one simulated pool.
type simConfig struct {
	Peers, Owners int
	Tasks         int64
	Liars         float64 // share of owners that lie
	Collude       bool
	Patient       bool
	PatientAfter  int     // honest results before a patient liar lies
	SpotCheck     float64 // 0: no adaptive replication (quorum 2 always)
	Exclude       bool    // sanctions on (DefaultExcludeAfter); off to compare with the model
	// Control runs the model's own rule, to check the simulation against
	// it: k = 2 replicas and no more (MaxReplicas 2), so a split is never
	// settled, it ends unverified; a lie is accepted exactly when its
	// partner colludes. No sanctions.
	Control bool
	Seed    uint64
}

// simResult is what a run measured.
type simResult struct {
	Tasks, Replicas  int64 // accepted tasks, computed replicas
	Lies, LiesKept   int64 // wrong results returned; those accepted into the merge
	WrongTasks       int64 // tasks merged with a wrong value
	Revoked          int64 // receipts revoked
	SteadyEfficiency float64
	Efficiency       float64
	Excluded         int // devices that were refused work for deviations

	// Deff is the design effect of counting lies per task, for the
	// share's interval (designEffect).
	Deff float64
}

func (c simConfig) String() string {
	kind := "independent"
	if c.Collude {
		kind = "colluding"
	}
	when := "steady"
	if c.Patient {
		when = fmt.Sprintf("patient(%d)", c.PatientAfter)
	}
	return fmt.Sprintf("f=%.2f %s %s p=%.2f", c.Liars, kind, when, c.SpotCheck)
}

// runSim runs one simulated pool to the end of its job.
func runSim(tb testing.TB, c simConfig) simResult {
	h := newHarness(tb.(*testing.T), pool.NewMemStore(), func(sc *pool.SchedulerConfig) {
		sc.CommitDelay = time.Microsecond
		sc.Trust.Secret = []byte(fmt.Sprintf("simulation %d", c.Seed))
		if !c.Exclude {
			sc.Trust.ExcludeAfter = math.MaxInt32
		}
		if c.Control {
			sc.MaxReplicas = 2
		}
	})
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	sub := h.Device("submitter", "submitter")
	nLiarOwners := int(math.Round(c.Liars * float64(c.Owners)))
	type peer struct {
		id    string
		liar  bool
		count int
	}
	peers := make([]*peer, c.Peers)
	for i := range peers {
		o := i % c.Owners
		peers[i] = &peer{id: h.Device(fmt.Sprintf("o%d", o), fmt.Sprintf("p%d", i)), liar: o < nLiarOwners}
	}
	pol := pooltest.Policy{Redundancy: 2, Quorum: 2, LeaseTimeout: time.Hour}
	if c.SpotCheck > 0 {
		pol.Verify = fmt.Sprintf("min_quorum = 1\nspot_check = %v\ntrust_after = 10\n", c.SpotCheck)
	}
	j := h.Job(fmt.Sprintf("sim-%d", c.Seed), c.Tasks, pol, sub)
	ctx := context.Background()
	var r simResult
	lied := map[string]int64{} // lease of a lie → its task
	excluded := map[string]bool{}
	idle := 0
	for step := 0; ; step++ {
		h.Clock.Advance(time.Millisecond)
		p := peers[rng.IntN(len(peers))]
		ls, err := h.S.Lease(ctx, p.id, 1)
		if errors.Is(err, pool.ErrExcluded) {
			excluded[p.id] = true
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		if len(ls) == 0 {
			if st, _ := h.S.Status(j.ID); st.Complete {
				break
			}
			if idle++; idle > 100*c.Peers {
				st, _ := h.S.Status(j.ID)
				tb.Fatalf("no peer can take a task any more: %+v", st)
			}
			continue
		}
		idle = 0
		l := ls[0]
		sub := good(l.Task)
		if p.liar && (!c.Patient || p.count >= c.PatientAfter) {
			if c.Collude {
				sub = bad(l.Task)
			} else {
				sub = pooltest.Result(fmt.Appendf(nil, "lie %d by %s", l.Task, p.id))
			}
			lied[l.ID] = l.Task
			r.Lies++
		}
		p.count++
		r.Replicas++
		if err := h.S.Submit(ctx, l.Peer, l.ID, sub); err != nil {
			tb.Fatal(err)
		}
	}
	r.Excluded = len(excluded)
	// The merge: every outcome, in pages.
	wrongTask := map[int64]bool{}
	for after := int64(0); ; {
		vs, err := h.S.Results(ctx, sub, j.ID, after, 10000)
		if err != nil {
			tb.Fatal(err)
		}
		if len(vs) == 0 {
			break
		}
		for _, v := range vs {
			if v.Status == pool.OutcomeOK {
				r.Tasks++
				if string(v.Result) != string(good(v.Task).Result) {
					r.WrongTasks++
					wrongTask[v.Task] = true
				}
			}
		}
		after = vs[len(vs)-1].Seq
	}
	// The ledger: replicas per task, kept and revoked lies.
	perTask := map[int64]int{}
	receipt := map[string]bool{}
	revoked := map[string]bool{}
	var all []pool.Entry
	for after := uint64(0); ; {
		es, err := h.S.Ledger(after, 10000)
		if err != nil {
			tb.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		all = append(all, es...)
		after = es[len(es)-1].Seq
	}
	if err := pool.VerifyLedger(all, h.S.PublicKey()); err != nil {
		tb.Fatalf("the ledger does not verify: %v", err)
	}
	for _, e := range all {
		switch e.Kind {
		case pool.KindRevocation:
			revoked[e.Lease] = true
			r.Revoked++
		case pool.KindReceipt:
			receipt[e.Lease] = true
			perTask[e.Task]++
		default:
			perTask[e.Task]++
		}
	}
	// Lies of one task are not independent (two colluders' lies on a
	// task are kept together), so the interval counts tasks as clusters.
	liesOf, keptOf := map[int64]float64{}, map[int64]float64{}
	for l, task := range lied {
		liesOf[task]++
		if receipt[l] && !revoked[l] {
			r.LiesKept++
			keptOf[task]++
		}
	}
	r.Deff = designEffect(liesOf, keptOf)
	lo, hi := c.Tasks*3/10, c.Tasks*7/10
	var steadyTasks, steadyReplicas int64
	for i := lo; i < hi; i++ {
		steadyTasks++
		steadyReplicas += int64(perTask[i])
	}
	r.SteadyEfficiency = float64(steadyTasks) / float64(steadyReplicas)
	r.Efficiency = float64(r.Tasks) / float64(r.Replicas)
	return r
}

// model is the share of wrong results accepted that the model
// predicts for colluding liars: P = (1 − p)·f^(k−1), quorum k = 2, with f
// the chance that a lie's partner colludes. Liars are whole owners and a
// task's replicas go to distinct owners, so the partner is drawn from the
// other owners' devices: f = (lying owners − 1)/(owners − 1), not quite
// the share of lying owners (0.0955 rather than 0.1 for 20 of 200).
func model(c simConfig) float64 {
	if !c.Collude {
		return 0
	}
	liars := math.Round(c.Liars * float64(c.Owners))
	f := (liars - 1) / float64(c.Owners-1)
	return (1 - c.SpotCheck) * f
}

// designEffect is how much counting lies per task inflates the variance
// of the share kept over independent lies (Kish's design effect, from the
// ratio estimator's cluster variance); at least 1.
func designEffect(lies, kept map[int64]float64) float64 {
	var n, sumL, sumK float64
	for t, l := range lies {
		n, sumL, sumK = n+1, sumL+l, sumK+kept[t]
	}
	if n < 2 || sumK == 0 || sumK == sumL {
		return 1
	}
	p := sumK / sumL
	var ss float64
	for t, l := range lies {
		d := kept[t] - p*l
		ss += d * d
	}
	clusterVar := n / (n - 1) * ss / (sumL * sumL)
	return max(1, clusterVar/(p*(1-p)/sumL))
}

// shareDeff is kept/all with a 95% Wilson interval over the effective
// number of independent lies, all/deff.
func shareDeff(kept, all int64, deff float64) (p, lo, hi float64) {
	if all == 0 {
		return 0, 0, 0
	}
	n := float64(all) / deff
	p = float64(kept) / float64(all)
	const z = 1.96
	d := 1 + z*z/n
	mid := (p + z*z/(2*n)) / d
	half := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / d
	return p, mid - half, mid + half
}

const simHeader = "| liars | spot check p | sanctions | wrong results accepted (95% CI) | model (1−p)·f^(k−1) | wrong tasks merged | receipts revoked | efficiency: all / once trusted | goal 0.9/(1+p) |\n" +
	"|---|---|---|---|---|---|---|---|---|"

// simRow runs c and formats its row of the table.
func simRow(tb testing.TB, c simConfig) string {
	start := time.Now()
	r := runSim(tb, c)
	p, lo, hi := shareDeff(r.LiesKept, r.Lies, r.Deff)
	goal := "—"
	if c.SpotCheck > 0 {
		goal = fmt.Sprintf("%.3f", 0.9/(1+c.SpotCheck))
	}
	liars := "none"
	if c.Liars > 0 {
		liars = strings.TrimSuffix(c.String(), fmt.Sprintf(" p=%.2f", c.SpotCheck))
	}
	sanctions := "off"
	if c.Control {
		sanctions = "off; control: a split ends unverified"
	}
	if c.Exclude {
		sanctions = fmt.Sprintf("on (%d devices excluded)", r.Excluded)
	}
	tb.Logf("%s: %+v (%v)", c, r, time.Since(start).Round(time.Millisecond))
	return fmt.Sprintf("| %s | %.2f | %s | %.4f (%.4f–%.4f) of %d | %.4f | %d of %d | %d | %.3f / %.3f | %s |",
		liars, c.SpotCheck, sanctions, p, lo, hi, r.Lies, model(c), r.WrongTasks, r.Tasks, r.Revoked, r.Efficiency, r.SteadyEfficiency, goal)
}

// TestSimulationSmall runs small pools (40 peers of 10 owners, 800 tasks;
// 2,000 for adaptive replication, whose peers earn trust first): wrong results accepted stay within the model's bound, liars
// that lie independently never get a wrong value merged, a liar caught
// after acceptance has its receipts revoked, and adaptive replication's
// efficiency in an honest pool meets the goal.
func TestSimulationSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation skipped in -short mode")
	}
	base := simConfig{Peers: 40, Owners: 10, Tasks: 800, Seed: 1, PatientAfter: 20}
	atMostModel := func(t *testing.T, c simConfig, r simResult) {
		t.Helper()
		p, lo, hi := shareDeff(r.LiesKept, r.Lies, r.Deff)
		if m := model(c); lo > m {
			t.Errorf("wrong results accepted %.4f (%.4f–%.4f of %d), above the model's %.4f", p, lo, hi, r.Lies, m)
		}
	}
	t.Run("colluding, full replication", func(t *testing.T) {
		c := base
		c.Liars, c.Collude = 0.2, true
		atMostModel(t, c, runSim(t, c))
	})
	t.Run("independent liars never agree", func(t *testing.T) {
		c := base
		c.Liars, c.Exclude = 0.2, true
		if r := runSim(t, c); r.WrongTasks != 0 || r.LiesKept != 0 {
			t.Errorf("independent liars got %d wrong tasks merged, %d lies kept", r.WrongTasks, r.LiesKept)
		}
	})
	t.Run("control meets the model", func(t *testing.T) {
		// The model's own rule in the real scheduler: the measured share
		// must match P = f^(k-1) within its 95% interval. 10 owners, 3
		// colluding: a lie's partner colludes with chance 2/9.
		c := base
		c.Liars, c.Collude, c.Control, c.Tasks = 0.3, true, true, 2000
		r := runSim(t, c)
		p, lo, hi := shareDeff(r.LiesKept, r.Lies, r.Deff)
		t.Logf("control: wrong results accepted %.4f (%.4f–%.4f of %d), model %.4f", p, lo, hi, r.Lies, model(c))
		if m := model(c); m < lo || m > hi {
			t.Errorf("control: wrong results accepted %.4f (%.4f–%.4f of %d), the model says %.4f", p, lo, hi, r.Lies, m)
		}
	})
	t.Run("honest pool, adaptive", func(t *testing.T) {
		c := base
		c.SpotCheck, c.Tasks = 0.1, 2000 // each peer needs 10 checked results first
		r := runSim(t, c)
		if goal := 0.9 / (1 + c.SpotCheck); r.SteadyEfficiency < goal {
			t.Errorf("efficiency once trusted %.3f, goal %.3f (%+v)", r.SteadyEfficiency, goal, r)
		}
		if r.WrongTasks != 0 || r.Revoked != 0 {
			t.Errorf("%d wrong tasks, %d receipts revoked in an honest pool", r.WrongTasks, r.Revoked)
		}
	})
	t.Run("patient colluders, adaptive, caught and revoked", func(t *testing.T) {
		c := base
		c.Liars, c.Collude, c.Patient, c.SpotCheck, c.Exclude, c.Tasks = 0.2, true, true, 0.1, true, 2000
		r := runSim(t, c)
		if r.Revoked == 0 {
			t.Errorf("no receipt revoked: %+v", r)
		}
		atMostModel(t, c, r)
	})
}

// TestSimulationFull is docs/benchmarks.md's table: go test -run
// TestSimulationFull -sim.full -v ./pool (make sim). Each row is printed
// as soon as it is measured.
func TestSimulationFull(t *testing.T) {
	if !*simFull {
		t.Skip("the full-size simulation runs with -sim.full (make sim)")
	}
	base := simConfig{Peers: 1000, Owners: 200, Tasks: *simTasks, Seed: 1, PatientAfter: 20}
	row := func(f float64, collude, patient bool, p float64, exclude bool) simConfig {
		c := base
		c.Liars, c.Collude, c.Patient, c.SpotCheck, c.Exclude = f, collude, patient, p, exclude
		return c
	}
	control := func(f float64) simConfig {
		c := row(f, true, false, 0, false)
		c.Control = true
		return c
	}
	rows := []simConfig{
		row(0, false, false, 0.1, true),   // honest pool: efficiency of adaptive replication
		row(0.1, true, false, 0, false),   // the model's case, p = 0, no sanctions
		row(0.1, true, true, 0.1, true),   // patient colluders under adaptive replication
		row(0.3, true, false, 0, false),   // the model's case, more liars
		row(0.3, true, true, 0.1, true),   // patient colluders, more liars
		row(0.1, true, false, 0.1, false), // steady colluders, adaptive, no sanctions
		row(0.1, false, true, 0.1, true),  // patient independent liars
		control(0.1),                      // the model's own rule: splits end unverified
		control(0.3),
	}
	fmt.Println(simHeader)
	for i, c := range rows {
		if *simRows != "" && !slices.Contains(strings.Split(*simRows, ","), fmt.Sprint(i+1)) {
			continue
		}
		fmt.Println(simRow(t, c))
	}
}
