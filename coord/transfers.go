package coord

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"idlepool/job"
	"idlepool/pool"
)

// Limits of transfer reports (and MaxWorkTransfers).
const (
	// maxTransferBytes bounds one field of one report (1 PiB): more is
	// no device's fetch. A device's sums for a job stop there too, so no
	// sum overflows.
	maxTransferBytes = 1 << 50
	// maxTransferJobs, maxTransferDevices and maxTransferEntries bound
	// what the book keeps: the jobs with reports, the devices per job,
	// and the (job, device) sums in all (about 100 bytes each).
	maxTransferJobs    = 4096
	maxTransferDevices = 10000
	maxTransferEntries = 1 << 20
)

// checkTransfers checks the shape of a WorkRequest's reports: at most
// MaxWorkTransfers, a job ID each, no job twice, no negative or
// implausible count.
func checkTransfers(ts []TransferReport) error {
	if len(ts) > MaxWorkTransfers {
		return fmt.Errorf("field \"transfers\": %d reports, the limit is %d per request", len(ts), MaxWorkTransfers)
	}
	seen := make(map[HexDigest]bool, len(ts))
	for i, t := range ts {
		if t.Job == (HexDigest{}) {
			return fmt.Errorf("transfers[%d]: field \"job\" is missing", i)
		}
		if seen[t.Job] {
			return fmt.Errorf("transfers[%d]: job %s appears twice", i, t.Job)
		}
		seen[t.Job] = true
		for _, f := range []struct {
			name string
			n    int64
		}{{"direct", t.Direct}, {"relayed", t.Relayed}, {"coordinator", t.Coordinator}} {
			if f.n < 0 || f.n > maxTransferBytes {
				return fmt.Errorf("transfers[%d] (job %s): field %q: %d bytes is out of range (0 to %d)", i, t.Job, f.name, f.n, int64(maxTransferBytes))
			}
		}
	}
	return nil
}

// transferBook adds up the transfer reports per job and device, in
// memory: a restarted coordinator, or another node of a cluster, starts
// from nothing (the counts describe; nothing depends on them). It keeps
// at most maxTransferJobs jobs, forgetting first the jobs the pool no
// longer knows or that are complete, and at most maxTransferDevices
// devices per job (later devices are not counted in that job's status).
// Safe for concurrent use.
type transferBook struct {
	known func(job.ID) (complete, ok bool) // the pool's view of a job

	mu      sync.Mutex
	jobs    map[job.ID]map[string]pool.Transfer
	order   []job.ID // jobs in the order their first report came
	entries int      // sums over all jobs

	bytes *prometheus.CounterVec // idlepool_transfer_bytes_total{path}
}

func newTransferBook(known func(job.ID) (complete, ok bool)) *transferBook {
	b := &transferBook{known: known, jobs: map[job.ID]map[string]pool.Transfer{},
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlepool_transfer_bytes_total",
			Help: "Bytes of jobs' files the pool's devices reported fetching, by path: direct (device to device), relayed (through a TURN relay), coordinator.",
		}, []string{"path"})}
	for _, p := range []string{"direct", "relayed", "coordinator"} {
		b.bytes.WithLabelValues(p)
	}
	return b
}

// add counts device's reports; a report for a job the pool does not know
// is dropped.
func (b *transferBook) add(device string, ts []TransferReport) {
	for _, t := range ts {
		id := job.ID(t.Job)
		if t.Transfer.Zero() {
			continue
		}
		if _, ok := b.known(id); !ok {
			continue
		}
		b.bytes.WithLabelValues("direct").Add(float64(t.Direct))
		b.bytes.WithLabelValues("relayed").Add(float64(t.Relayed))
		b.bytes.WithLabelValues("coordinator").Add(float64(t.Coordinator))
		b.mu.Lock()
		devs, ok := b.jobs[id]
		if !ok {
			b.makeRoom()
			devs = map[string]pool.Transfer{}
			b.jobs[id] = devs
			b.order = append(b.order, id)
		}
		if old, ok := devs[device]; ok {
			devs[device] = capped(old.Add(t.Transfer))
		} else if len(devs) < maxTransferDevices && b.entries < maxTransferEntries {
			devs[device] = t.Transfer
			b.entries++
		}
		b.mu.Unlock()
	}
}

// capped returns t with each count at most maxTransferBytes.
func capped(t pool.Transfer) pool.Transfer {
	return pool.Transfer{Direct: min(t.Direct, maxTransferBytes), Relayed: min(t.Relayed, maxTransferBytes),
		Coordinator: min(t.Coordinator, maxTransferBytes)}
}

// makeRoom, when the book is full (of jobs or of sums), forgets every
// job the pool no longer knows or that is complete, then the oldest
// until it is three quarters full, so that the next new jobs find room
// without another pass; b.mu is held.
func (b *transferBook) makeRoom() {
	if len(b.jobs) < maxTransferJobs && b.entries < maxTransferEntries {
		return
	}
	forget := func(id job.ID) {
		b.entries -= len(b.jobs[id])
		delete(b.jobs, id)
	}
	keep := b.order[:0]
	for _, id := range b.order {
		if complete, ok := b.known(id); !ok || complete {
			forget(id)
			continue
		}
		keep = append(keep, id)
	}
	b.order = keep
	for len(b.order) > 0 && (len(b.jobs) > maxTransferJobs*3/4 || b.entries > maxTransferEntries*3/4) {
		forget(b.order[0]) // every job left is live: the oldest goes
		b.order = b.order[1:]
	}
}

// device returns what device reported over all jobs the book holds;
// false when it reported nothing.
func (b *transferBook) device(device string) (pool.Transfer, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum pool.Transfer
	found := false
	for _, devs := range b.jobs {
		if t, ok := devs[device]; ok {
			sum, found = capped(sum.Add(t)), true
		}
	}
	return sum, found
}

// summary returns job id's sum, nil when no device reported.
func (b *transferBook) summary(id job.ID) *pool.JobTransfer {
	b.mu.Lock()
	defer b.mu.Unlock()
	devs, ok := b.jobs[id]
	if !ok {
		return nil
	}
	var s pool.JobTransfer
	for _, t := range devs {
		s.Note(t)
	}
	return &s
}
