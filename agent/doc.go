// Package agent is the donor side of a pool, and the client that submits
// jobs to one. It is used by `idlepool join` (headless) and the tray app,
// and by `idlepool submit`, `status` and `result`.
//
// An Agent joins a pool (it pins the coordinator's key on first contact
// and registers its device key, endorsed by its owner key), then pulls a
// lease whenever one of its slots is free: whoever is free takes the next
// task. It fetches the job's canonical encoding and files by digest into
// the home's Cache (checking every digest; each file stored once, however
// many jobs name it, and the cache held under the owner's cap), rebuilds
// the job with job.FromCanonical, runs the task in the sandboxed worker
// while heartbeating the lease, records the result as a pending
// contribution in its local Store, and only then sends it. Requests are
// signed with the pool's time as measured from its answers, so a device
// whose clock is off keeps working; a task whose lease ran out while the
// pool could not be reached is abandoned (Config.AbandonAfter). Results the coordinator has not
// acknowledged are sent again at start and whenever the coordinator is back
// (sending again is idempotent). It follows its entries in the pool's
// signed ledger, checks them with the pinned key, and confirms or rejects
// its contributions.
//
// The agent obeys its owner's policy (Config.Signals and Decide, e.g. an
// idle.Sampler and idle.Decide): it samples every 250 ms, and when the
// decision becomes "wait" it suspends its worker processes at once
// (worker.Pool.Suspend; within a second of the owner coming back) and
// leases nothing more, keeping its leases by heartbeat until a task has
// been suspended for its job's lease timeout less a margin, then hands
// that lease back; a task whose pause is expected to last longer than the
// work it has done (a game started, on battery, outside the hours, the
// owner at the machine by their own pattern: PredictPause) is handed back
// at once instead. On "run" it resumes and leases on Decision.Cores
// slots. Status says what it does and why; with Config.LocalAPI it
// serves that to the tray app on a private socket (ReadStatus).
//
// With Config.Offer it publishes a signed capacity offer (package offers:
// the machine, the owner's settings, the GPUs found, the donor's
// preferences, and the policy's current state) once it has joined, and
// refreshes it every third of Config.OfferTTL and when the policy's state
// changes; the pool leases it only tasks of jobs that match the offer,
// and forgets the offer when the agent vanishes and it expires. To take
// part in several pools, run one Agent per pool over a shared Executor
// and Store (as `idlepool join URL1 URL2` does), each with its share of
// the slots.
//
// Follow is the other side: the merger of a job, which folds verified
// outcomes into the job's accumulators exactly as a solo run does.
//
//	a, err := agent.New(agent.Config{PoolURL: url, Home: dirs, DeviceKey: dev,
//		OwnerKey: owner, Slots: 4, Executor: workers, Store: local})
//	err = a.Serve(ctx) // until ctx ends; running leases are handed back
//
// Concurrency and ownership: Serve owns every goroutine it starts (one per
// slot, an outbox, a receipt follower, the offer publisher, the governor
// and the local API, under an errgroup) and returns after all have stopped. A Client is safe
// for concurrent use. Follow runs on the calling goroutine.
package agent
