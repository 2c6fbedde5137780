package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/store"
	"idlepool/worker"
)

// This file is `idlepool jobs` (the jobs seeking compute in the pools this
// machine knows, and whether this machine matches them; the donor's
// accept and refuse choices) and `idlepool offers` (a pool's live capacity
// offers, for its operator). The --json shapes are in docs/offers.md.

const jobsHelp = `Usage:
  idlepool jobs [--pool URL]... [--json]
  idlepool jobs accept|refuse|clear JOB_ID|owner:OWNER_ID [--pool URL]...
  idlepool jobs gpu-programs on|off [--pool URL]...
  idlepool jobs weight WEIGHT --pool URL...
  idlepool jobs limits [memory=MIB] [time=DURATION] [--pool URL]...
  idlepool jobs choices [--json]

Lists the jobs seeking compute in the pools this machine knows (those it
joined or talked to, or those given with --pool), and whether this
machine matches each: what the job needs against what this machine
offers (see 'idlepool status') and what you accept. A job that does not
match says why.

accept and refuse record your choice about a job (its ID, or the first
digits of it shown in the list) or about all jobs of an owner
(owner:OWNER_ID); clear forgets it. Without --pool the choice holds in
every pool. A running agent honours it at once: it hands back any task it
is given against the choice and renews its offer.
Refused jobs are never leased to this machine; accepted jobs and owners
are preferred.

gpu-programs on allows jobs that run GPU programs (CUDA) on this
machine's enabled GPUs (see 'idlepool settings'); without --pool in every
pool. weight sets how much of this machine a pool gets among the pools
it joined (default 1 each; 0 gives it nothing). limits sets the most
memory and time one task may take (0: no ceiling). choices shows all of
your choices.

Flags:
`

// poolList is a repeatable --pool flag.
type poolList []string

func (p *poolList) String() string     { return strings.Join(*p, ",") }
func (p *poolList) Set(v string) error { *p = append(*p, v); return nil }

func cmdJobs(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool jobs", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprint(g.stderr, jobsHelp)
		fs.PrintDefaults()
	}
	g.register(fs)
	var pools poolList
	fs.Var(&pools, "pool", "a pool's `URL` (repeatable); default: every pool this machine knows")
	invite := fs.String("invite", "", "the pool's invite `TOKEN` (invite-only pools)")
	ownerKey := fs.String("owner-key", "", "owner key `FILE` (default: owner.key in the config directory)")
	asJSON := fs.Bool("json", false, "print one JSON document (see docs/offers.md)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	b := browser{g: g, invite: *invite, ownerKey: *ownerKey}
	if len(pos) == 0 {
		return b.list(ctx, pools, *asJSON)
	}
	switch verb := pos[0]; verb {
	case "accept", "refuse", "clear":
		if len(pos) != 2 {
			fs.Usage()
			return &userError{Msg: fmt.Sprintf("jobs %s needs one JOB_ID or owner:OWNER_ID", verb),
				Hint: "idlepool jobs " + verb + " 3f2a9c0b1d4e (a job ID as 'idlepool jobs' shows it) or owner:idk3m9x2qa...", Cause: errUsage}
		}
		return b.changed(ctx, b.choose(ctx, verb, pos[1], pools, *asJSON))
	case "gpu-programs", "weight":
		if len(pos) != 2 {
			fs.Usage()
			return &userError{Msg: fmt.Sprintf("jobs %s needs one value", verb), Hint: "idlepool jobs gpu-programs on, or idlepool jobs weight 2 --pool URL", Cause: errUsage}
		}
		return b.changed(ctx, b.setPool(ctx, verb, pos[1], pools))
	case "limits":
		if len(pos) < 2 {
			fs.Usage()
			return &userError{Msg: "jobs limits needs memory=MIB and/or time=DURATION", Hint: "idlepool jobs limits memory=2048 time=30m (0 for no ceiling)", Cause: errUsage}
		}
		return b.changed(ctx, b.setLimits(ctx, pos[1:], pools))
	case "choices":
		if len(pos) != 1 {
			fs.Usage()
			return &userError{Msg: "jobs choices takes no arguments", Cause: errUsage}
		}
		return b.showChoices(ctx, *asJSON)
	default:
		fs.Usage()
		return &userError{Msg: fmt.Sprintf("jobs: unknown subcommand %q", verb),
			Hint: "'idlepool jobs', or 'idlepool jobs accept|refuse|clear JOB_ID|owner:OWNER_ID'", Cause: errUsage}
	}
}

// browser talks to the pools a donor browses.
type browser struct {
	g        *globals
	invite   string
	ownerKey string
}

// knownPools returns the URLs of the pools this machine knows: those in
// the local store's preferences and those whose key it pinned (join,
// submit and status pin a pool's key), sorted, without duplicates.
func knownPools(ctx context.Context, dirs home.Dirs, local *store.Local) ([]string, error) {
	var urls []string
	if local != nil {
		p, err := local.Preferences(ctx)
		if err != nil {
			return nil, err
		}
		for _, pp := range p.Pools {
			urls = append(urls, pp.URL)
		}
	}
	pins, _ := filepath.Glob(filepath.Join(dirs.Config, "pools", "*.json"))
	for _, f := range pins {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pin struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(b, &pin) == nil && pin.URL != "" {
			urls = append(urls, pin.URL)
		}
	}
	slices.Sort(urls)
	return slices.Compact(urls), nil
}

// openLocalIfExists opens the local store when there is one; nil when
// this machine has none yet.
func openLocalIfExists(dirs home.Dirs) (*store.Local, error) {
	if _, err := os.Stat(filepath.Join(dirs.Data, "local.db")); err != nil {
		return nil, nil
	}
	return openLocal(dirs)
}

// poolListings is what one pool answered.
type poolListings struct {
	url      string
	name     string
	listings []offers.Listing
	err      error
}

// fetch connects to each pool (pinning its key, registering this device)
// and reads its listings. A pool that fails is returned with its error.
func (b browser) fetch(ctx context.Context, urls []string) []poolListings {
	out := make([]poolListings, len(urls))
	for i, u := range urls {
		out[i].url = u
		pc := &poolConn{url: u, invite: b.invite, ownerKey: b.ownerKey}
		s, err := pc.connect(ctx, b.g)
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].name = s.pool
		ls, err := s.c.Listings(ctx)
		if err != nil {
			if errors.Is(err, agent.ErrNotFound) {
				err = &userError{Msg: fmt.Sprintf("the pool at %s lists no jobs for donors", u),
					Hint: "its coordinator runs an idlepool from before job listings; ask its operator to update", Cause: err}
			}
			out[i].err = poolError(err, u, s.dirs)
			continue
		}
		out[i].listings = ls
	}
	return out
}

// jobsDoc is the JSON of `idlepool jobs` (docs/offers.md).
type jobsDoc struct {
	At    time.Time     `json:"at"`
	Pools []poolDoc     `json:"pools"`
	Jobs  []jobMatchDoc `json:"jobs"`
}

type poolDoc struct {
	URL   string        `json:"url"`
	Name  string        `json:"name,omitempty"`
	Error string        `json:"error,omitempty"`
	Offer *offers.Offer `json:"offer,omitempty"` // this machine's offer to the pool, unsigned
}

type jobMatchDoc struct {
	PoolURL string         `json:"pool_url"`
	Listing offers.Listing `json:"listing"`
	Match   bool           `json:"match"`
	Why     []string       `json:"why"`
}

// list is `idlepool jobs` without a subcommand.
func (b browser) list(ctx context.Context, pools []string, asJSON bool) error {
	g := b.g
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	local, err := openLocalIfExists(dirs)
	if err != nil {
		return err
	}
	if local != nil {
		defer local.Close()
	}
	if len(pools) == 0 {
		if pools, err = knownPools(ctx, dirs, local); err != nil {
			return err
		}
	}
	if len(pools) == 0 {
		return &userError{Msg: "this machine knows no pools yet",
			Hint: "give one: idlepool jobs --pool http://HOST:7420 (or join one with 'idlepool join POOL_URL')", Cause: errUsage}
	}
	prefs := offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}
	settings := idle.Defaults()
	if local != nil {
		if prefs, err = local.Preferences(ctx); err != nil {
			return err
		}
		if settings, err = local.Settings(ctx); err != nil {
			return &userError{Msg: fmt.Sprintf("the saved settings are unusable: %v", err),
				Hint: "'idlepool settings reset' goes back to the defaults", Cause: err}
		}
	}
	dev, owner, err := loadKeys(dirs, b.ownerKey)
	if err != nil {
		return err
	}
	capacity := localCapacity(ctx, settings, g)
	now := time.Now()
	answers := b.fetch(ctx, pools)
	for _, a := range answers {
		// Remember the names of known pools, for 'idlepool jobs choices'.
		if pp, known := prefs.Pool(a.url); local != nil && known && a.err == nil && pp.Name != a.name {
			if err := local.AddPool(ctx, a.url, a.name); err != nil {
				g.logger().Debug("Cannot record the pool's name", "pool", a.url, "err", err)
			}
		}
	}

	doc := jobsDoc{At: now, Pools: []poolDoc{}, Jobs: []jobMatchDoc{}}
	var failed []error
	for _, a := range answers {
		pd := poolDoc{URL: a.url, Name: a.name}
		if a.err != nil {
			pd.Error = a.err.Error()
			if ue, ok := errors.AsType[*userError](a.err); ok {
				pd.Error = ue.Msg
			}
			failed = append(failed, a.err)
			doc.Pools = append(doc.Pools, pd)
			continue
		}
		o := offers.Build(offers.Spec{Pool: a.name, PoolURL: a.url, Peer: dev.ID(), Owner: owner.ID(),
			Capacity: capacity, Preferences: prefs, Issued: now})
		pd.Offer = &o
		doc.Pools = append(doc.Pools, pd)
		var yes, no []jobMatchDoc
		for _, l := range offers.RankJobs(o, a.listings) {
			ok, why := offers.Match(o, l, now)
			if why == nil {
				why = []string{}
			}
			d := jobMatchDoc{PoolURL: a.url, Listing: l, Match: ok, Why: why}
			if ok {
				yes = append(yes, d)
			} else {
				no = append(no, d)
			}
		}
		doc.Jobs = append(append(doc.Jobs, yes...), no...)
	}
	if len(failed) == len(answers) {
		return failed[0]
	}
	if asJSON {
		out, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return fmt.Errorf("encode jobs: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", out)
	} else {
		printJobs(g.stdout, doc, capacity)
	}
	for _, err := range failed {
		msg := err.Error()
		if ue, ok := errors.AsType[*userError](err); ok {
			msg = ue.Msg
		}
		fmt.Fprintf(g.stderr, "idlepool: skipped a pool: %s\n", msg)
	}
	return nil
}

// localCapacity is what this machine offers: idle.NewCapacity over the
// hardware, the owner's settings and the GPUs NVML finds now, as an agent
// offers it.
func localCapacity(ctx context.Context, s idle.Settings, g *globals) idle.Capacity {
	m, err := idle.ReadMachine(ctx)
	if err != nil {
		g.logger().Debug("Machine partly unknown", "err", err)
	}
	l := worker.NewGPULister()
	defer l.Close()
	gs, err := agent.NVMLGPUs{Lister: l}.GPUs(ctx)
	r := idle.Reading[[]idle.GPU]{Value: gs, Known: err == nil, Source: "nvml"}
	if err != nil {
		r.Err = err.Error()
	}
	return idle.NewCapacity(m, s, r)
}

// printJobs writes the jobs as a table a person reads at a glance, then
// what this machine offers and how to choose.
func printJobs(w io.Writer, doc jobsDoc, c idle.Capacity) {
	if len(doc.Jobs) == 0 {
		var names []string
		for _, p := range doc.Pools {
			if p.Error == "" {
				names = append(names, poolLabel(p))
			}
		}
		fmt.Fprintf(w, "no jobs seek compute in %s right now\n", strings.Join(names, ", "))
		return
	}
	multi := len(doc.Pools) > 1
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	abouts := []string{""} // the line under each row (the header's: none)
	header := "ID\tJOB\tOWNER\t"
	if multi {
		header += "POOL\t"
	}
	fmt.Fprintln(tw, header+"NEEDS\tTASKS LEFT\tDONE\tQUORUM\tTHIS MACHINE")
	matches := 0
	for _, d := range doc.Jobs {
		l := d.Listing
		verdict := "✓ matches"
		if d.Match {
			matches++
		} else {
			verdict = "✗ " + d.Why[0]
			if n := len(d.Why) - 1; n > 0 {
				verdict += fmt.Sprintf(" (+%d more)", n)
			}
		}
		row := fmt.Sprintf("%s\t%s\t%s\t", l.Job.String()[:12], offers.PlainLine(l.Name, 40), offers.PlainLine(l.OwnerText(), 60))
		if multi {
			row += l.Pool + "\t"
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%d\t%d\t%s\n", row, needsText(l), l.TasksLeft, l.TasksDone, l.Quorum, verdict)
		abouts = append(abouts, jobAbout(l))
	}
	tw.Flush()
	// The lines under the rows go in after the columns are laid out: a
	// line without tabs among the rows would end tabwriter's column block,
	// and the rows after it would be aligned on their own.
	for i, row := range strings.SplitAfter(strings.TrimSuffix(table.String(), "\n"), "\n") {
		fmt.Fprint(w, strings.TrimSuffix(row, "\n")+"\n")
		if i < len(abouts) && abouts[i] != "" {
			fmt.Fprintln(w, "  "+abouts[i])
		}
	}
	fmt.Fprintf(w, "\n%d of %d jobs match this machine, which offers %s.\n", matches, len(doc.Jobs), offerText(c))
	fmt.Fprintln(w, "Choose: idlepool jobs accept|refuse ID (or owner:OWNER); --json shows every reason.")
	for _, d := range doc.Jobs {
		if slices.Contains(d.Why, offers.ReasonGPUPrograms) && len(c.GPUs) > 0 {
			fmt.Fprintln(w, "GPU programs: idlepool jobs gpu-programs on [--pool URL] allows them.")
			break
		}
	}
}

func poolLabel(p poolDoc) string {
	if p.Name != "" {
		return fmt.Sprintf("pool %s (%s)", p.Name, p.URL)
	}
	return "pool " + p.URL
}

// needsText writes what one task needs: "CPU, 256 MiB RAM" or "GPU 8 GiB
// cc 8.0+, 2 GiB RAM".
func needsText(l offers.Listing) string {
	kind := l.Processor()
	return kind + ", " + offers.MiBText(l.MemoryMiB) + " RAM"
}

// offerText writes what the machine offers: "7 cores, 12 GiB memory, no
// GPU, any time".
func offerText(c idle.Capacity) string {
	gpus := "no GPU"
	if len(c.GPUs) > 0 {
		var names []string
		for _, g := range c.GPUs {
			names = append(names, fmt.Sprintf("%s with %s", g.Name, offers.MiBText(g.MemoryMiB)))
		}
		gpus = strings.Join(names, ", ")
	}
	hours := "any time"
	if len(c.Schedule) > 0 {
		hours = c.Schedule.String()
	}
	cores := "1 core"
	if c.Cores != 1 {
		cores = fmt.Sprintf("%d cores", c.Cores)
	}
	return fmt.Sprintf("%s, %s memory, %s, %s", cores, offers.MiBText(c.MemoryMiB), gpus, hours)
}

// choiceDoc is the JSON of `idlepool jobs accept|refuse|clear`.
type choiceDoc struct {
	Choice string   `json:"choice"`          // accept | refuse | clear
	Job    string   `json:"job,omitempty"`   // 64 hex digits
	Name   string   `json:"name,omitempty"`  // the job's name, when a pool listed it
	Owner  string   `json:"owner,omitempty"` // owner ID
	Pools  []string `json:"pools"`           // the pools' URLs; [""]: every pool
}

// choose is `idlepool jobs accept|refuse|clear TARGET`.
func (b browser) choose(ctx context.Context, verb, target string, pools []string, asJSON bool) error {
	g := b.g
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	local, err := openLocal(dirs)
	if err != nil {
		return err
	}
	defer local.Close()
	doc := choiceDoc{Choice: verb, Pools: pools}
	if len(pools) == 0 {
		doc.Pools = []string{""}
	}
	if owner, ok := strings.CutPrefix(target, "owner:"); ok {
		owner = strings.TrimSuffix(strings.TrimSpace(owner), "…")
		if len(owner) < fullIDLen {
			if owner, err = b.resolveOwner(ctx, dirs, local, owner, pools); err != nil {
				return err
			}
		}
		doc.Owner = owner
	} else {
		id, name, err := b.resolveJob(ctx, dirs, local, target, pools)
		if err != nil {
			return err
		}
		doc.Job, doc.Name = id.String(), name
	}
	for _, p := range doc.Pools {
		var err error
		switch {
		case doc.Owner != "" && verb == "accept":
			err = local.AcceptOwner(ctx, p, doc.Owner)
		case doc.Owner != "" && verb == "refuse":
			err = local.RefuseOwner(ctx, p, doc.Owner)
		case doc.Owner != "":
			err = local.ClearOwner(ctx, p, doc.Owner)
		default:
			id, _ := job.ParseDigest(doc.Job)
			switch verb {
			case "accept":
				err = local.AcceptJob(ctx, p, id)
			case "refuse":
				err = local.RefuseJob(ctx, p, id)
			default:
				err = local.ClearJob(ctx, p, id)
			}
		}
		if err != nil {
			return err
		}
	}
	if asJSON {
		out, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return fmt.Errorf("encode choice: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", out)
		return nil
	}
	what := "all jobs of owner " + doc.Owner
	if doc.Job != "" {
		what = "job " + doc.Job[:12]
		if doc.Name != "" {
			what = fmt.Sprintf("job %s (%s)", doc.Name, doc.Job[:12])
		}
	}
	where := "in every pool"
	if len(pools) > 0 {
		where = "in " + strings.Join(pools, ", ")
	}
	switch verb {
	case "accept":
		fmt.Fprintf(g.stdout, "accepted %s %s: preferred over other jobs\n", what, where)
	case "refuse":
		fmt.Fprintf(g.stdout, "refused %s %s: this machine will not compute it\n", what, where)
	default:
		fmt.Fprintf(g.stdout, "cleared your choice about %s %s\n", what, where)
	}
	fmt.Fprintln(g.stdout, "A running agent hands back any task it is given against this choice, and renews its offer.")
	return nil
}

// fullIDLen is the length of a peer or owner ID: "id" and 32 base32
// digits (package identity).
const fullIDLen = 34

// listed returns the listings of the pools (given, else known).
func (b browser) listed(ctx context.Context, dirs home.Dirs, local *store.Local, pools []string) ([]offers.Listing, []string, error) {
	if len(pools) == 0 {
		var err error
		if pools, err = knownPools(ctx, dirs, local); err != nil {
			return nil, nil, err
		}
	}
	var all []offers.Listing
	for _, a := range b.fetch(ctx, pools) {
		all = append(all, a.listings...)
	}
	return all, pools, nil
}

// resolveOwner turns the first characters of an owner ID, as the OWNER
// column shows them, into the owner ID of a listed job.
func (b browser) resolveOwner(ctx context.Context, dirs home.Dirs, local *store.Local, prefix string, pools []string) (string, error) {
	if len(prefix) < 6 || !strings.HasPrefix(prefix, "id") {
		return "", &userError{Msg: fmt.Sprintf("%q is not an owner ID", prefix),
			Hint: "an owner ID starts with \"id\"; give it whole or its first characters as the OWNER column of 'idlepool jobs' shows them", Cause: errUsage}
	}
	ls, pools, err := b.listed(ctx, dirs, local, pools)
	if err != nil {
		return "", err
	}
	var found []string
	for _, l := range ls {
		if strings.HasPrefix(l.Owner, prefix) && !slices.Contains(found, l.Owner) {
			found = append(found, l.Owner)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", &userError{Msg: fmt.Sprintf("no job listed in %s has an owner whose ID starts with %s", strings.Join(pools, ", "), prefix),
			Hint: "give the whole owner ID ('idlepool jobs --json' shows it)", Cause: errUsage}
	}
	return "", &userError{Msg: fmt.Sprintf("%s starts several owners' IDs: %s", prefix, strings.Join(found, ", ")), Hint: "give more characters", Cause: errUsage}
}

// setPool is `idlepool jobs gpu-programs on|off` and `idlepool jobs
// weight W`.
func (b browser) setPool(ctx context.Context, verb, value string, pools []string) error {
	dirs, err := b.g.dirs()
	if err != nil {
		return err
	}
	local, err := openLocal(dirs)
	if err != nil {
		return err
	}
	defer local.Close()
	where := "in every pool"
	if len(pools) > 0 {
		where = "in " + strings.Join(pools, ", ")
	}
	switch verb {
	case "gpu-programs":
		allow, err := offers.ParseOnOff(value)
		if err != nil {
			return &userError{Msg: err.Error(), Hint: "idlepool jobs gpu-programs on", Cause: errors.Join(errUsage, err)}
		}
		targets := pools
		if len(targets) == 0 {
			targets = []string{""}
		}
		for _, p := range targets {
			if err := local.SetGPUPrograms(ctx, p, allow); err != nil {
				return err
			}
		}
		if allow {
			fmt.Fprintf(b.g.stdout, "GPU programs allowed %s, on the GPUs you enabled ('idlepool settings')\n", where)
		} else {
			fmt.Fprintf(b.g.stdout, "GPU programs not allowed %s\n", where)
		}
	case "weight":
		w, err := offers.ParseWeight(value)
		if err != nil {
			return &userError{Msg: err.Error(), Hint: "idlepool jobs weight 2 --pool URL", Cause: errors.Join(errUsage, err)}
		}
		if len(pools) == 0 {
			return &userError{Msg: "weight needs --pool URL", Hint: "idlepool jobs weight 2 --pool URL", Cause: errUsage}
		}
		for _, p := range pools {
			if err := local.SetPoolWeight(ctx, p, w); err != nil {
				return err
			}
		}
		prefs, err := local.Preferences(ctx)
		if err != nil {
			return err
		}
		for _, p := range pools {
			if len(prefs.Pools) == 1 {
				fmt.Fprintf(b.g.stdout, "%s gets all of this machine: it is the only pool it knows\n", p)
				continue
			}
			fmt.Fprintf(b.g.stdout, "%s gets %.0f%% of this machine among the %d pools it knows\n", p, prefs.Accept(p).Weight*100, len(prefs.Pools))
		}
	}
	return nil
}

// changed tells the running engine, if any, to read the donor's
// preferences now (tellAgent) once a change succeeded; it returns err.
func (b browser) changed(ctx context.Context, err error) error {
	if err != nil {
		return err
	}
	if dirs, derr := b.g.dirs(); derr == nil {
		b.g.tellAgent(ctx, dirs)
	}
	return nil
}

// setLimits is `idlepool jobs limits memory=MIB time=DURATION`: what is
// not given keeps its value.
func (b browser) setLimits(ctx context.Context, pairs, pools []string) error {
	dirs, err := b.g.dirs()
	if err != nil {
		return err
	}
	local, err := openLocal(dirs)
	if err != nil {
		return err
	}
	defer local.Close()
	prefs, err := local.Preferences(ctx)
	if err != nil {
		return err
	}
	targets := pools
	if len(targets) == 0 {
		targets = []string{""}
	}
	hint := "idlepool jobs limits memory=2048 time=30m (memory in MiB, time as 90s, 30m or 2h; 0 for no ceiling)"
	for _, p := range targets {
		pp := prefs.Global
		if p != "" {
			pp, _ = prefs.Pool(p)
		}
		mem, limit := pp.MaxMemoryMiB, pp.MaxTaskTime
		for _, kv := range pairs {
			k, v, ok := strings.Cut(kv, "=")
			switch {
			case ok && k == "memory":
				n, err := offers.ParseTaskMemoryMiB(v)
				if err != nil {
					return &userError{Msg: err.Error(), Hint: hint, Cause: errors.Join(errUsage, err)}
				}
				mem = n
			case ok && k == "time":
				d, err := offers.ParseTaskTime(v)
				if err != nil {
					return &userError{Msg: err.Error(), Hint: hint, Cause: errors.Join(errUsage, err)}
				}
				limit = d
			default:
				return &userError{Msg: fmt.Sprintf("%q is not memory=MIB or time=DURATION", kv), Hint: hint, Cause: errUsage}
			}
		}
		if err := local.SetTaskLimits(ctx, p, mem, limit); err != nil {
			return err
		}
		where := "in every pool"
		if p != "" {
			where = "in " + p
		}
		fmt.Fprintf(b.g.stdout, "a task may take %s and %s %s\n", limitText(mem, "at most "+offers.MiBText(mem)+" of memory", "any memory"),
			limitText(int64(limit), "at most "+idle.DurationText(limit), "any time"), where)
	}
	return nil
}

func limitText(n int64, set, none string) string {
	if n == 0 {
		return none
	}
	return set
}

// showChoices is `idlepool jobs choices`: the donor's preferences.
func (b browser) showChoices(ctx context.Context, asJSON bool) error {
	dirs, err := b.g.dirs()
	if err != nil {
		return err
	}
	local, err := openLocalIfExists(dirs)
	if err != nil {
		return err
	}
	prefs := offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}
	if local != nil {
		defer local.Close()
		if prefs, err = local.Preferences(ctx); err != nil {
			return err
		}
	}
	if prefs.Pools == nil {
		prefs.Pools = []offers.PoolPreferences{}
	}
	if asJSON {
		out, err := json.MarshalIndent(prefs, "", "  ")
		if err != nil {
			return fmt.Errorf("encode choices: %w", err)
		}
		fmt.Fprintf(b.g.stdout, "%s\n", out)
		return nil
	}
	w := b.g.stdout
	// show writes one pool's section: the effective GPU opt-in and
	// ceilings (a's), and the pool's own choices (what clear removes).
	show := func(label string, pp offers.PoolPreferences, a offers.Accept, share string) {
		fmt.Fprintf(w, "%s\n", label)
		line := func(k, v string) { fmt.Fprintf(w, "  %-16s  %s\n", k, v) }
		if share != "" {
			line("share", share)
		}
		line("GPU programs", map[bool]string{true: "allowed", false: "not allowed"}[a.GPUPrograms])
		line("per task", limitText(a.MaxMemoryMiB, "at most "+offers.MiBText(a.MaxMemoryMiB), "any memory")+", "+
			limitText(int64(a.MaxTaskTime), "at most "+idle.DurationText(a.MaxTaskTime), "any time"))
		ids := func(s []job.ID) string {
			var out []string
			for _, id := range s {
				out = append(out, id.String())
			}
			return strings.Join(out, ", ")
		}
		for _, c := range []struct{ k, v string }{
			{"accepted jobs", ids(pp.AcceptJobs)}, {"refused jobs", ids(pp.RefuseJobs)},
			{"preferred owners", strings.Join(pp.AcceptOwners, ", ")}, {"refused owners", strings.Join(pp.RefuseOwners, ", ")},
		} {
			if c.v != "" {
				line(c.k, c.v)
			}
		}
	}
	g := prefs.Global
	show("every pool", g, offers.Accept{GPUPrograms: g.GPUPrograms, MaxMemoryMiB: g.MaxMemoryMiB, MaxTaskTime: g.MaxTaskTime}, "")
	for _, pp := range prefs.Pools {
		label := pp.URL
		if pp.Name != "" {
			label += " (" + pp.Name + ")"
		}
		fmt.Fprintln(w)
		a := prefs.Accept(pp.URL)
		show(label, pp, a, fmt.Sprintf("weight %g: %.0f%% of this machine", pp.Weight, a.Weight*100))
	}
	return nil
}

// resolveJob turns a job ID or the first hex digits of one into the ID;
// a prefix is looked up in the listings of the pools (given, else
// known), and must name exactly one job. name is the job's name when a
// pool listed it.
func (b browser) resolveJob(ctx context.Context, dirs home.Dirs, local *store.Local, target string, pools []string) (job.ID, string, error) {
	target = strings.ToLower(strings.TrimSpace(target))
	if id, err := job.ParseDigest(target); err == nil {
		return id, "", nil
	}
	if _, err := hex.DecodeString(target + strings.Repeat("0", len(target)%2)); err != nil || len(target) < 6 || len(target) > 64 {
		return job.ID{}, "", &userError{Msg: fmt.Sprintf("%q is not a job ID", target),
			Hint: "give the job's ID (64 hex digits) or at least its first 6 digits as 'idlepool jobs' shows them, or owner:OWNER_ID", Cause: errUsage}
	}
	ls, pools, err := b.listed(ctx, dirs, local, pools)
	if err != nil {
		return job.ID{}, "", err
	}
	var found []offers.Listing
	for _, l := range ls {
		if strings.HasPrefix(l.Job.String(), target) && !slices.ContainsFunc(found, func(f offers.Listing) bool { return f.Job == l.Job }) {
			found = append(found, l)
		}
	}
	switch len(found) {
	case 1:
		return found[0].Job, found[0].Name, nil
	case 0:
		return job.ID{}, "", &userError{Msg: fmt.Sprintf("no job listed in %s starts with %s", strings.Join(pools, ", "), target),
			Hint: "'idlepool jobs' lists the jobs seeking compute; a job that is no longer listed needs its full ID", Cause: errUsage}
	}
	var names []string
	for _, l := range found {
		names = append(names, l.Job.String()[:16]+" ("+l.Name+")")
	}
	return job.ID{}, "", &userError{Msg: fmt.Sprintf("%s starts several jobs' IDs: %s", target, strings.Join(names, ", ")),
		Hint: "give more digits", Cause: errUsage}
}
