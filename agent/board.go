package agent

import "idlepool/offers"

// PoolBoard is one pool's job board as this machine sees it: the jobs
// seeking compute there, each matched against this machine's offer to
// the pool, or why the pool could not be read.
type PoolBoard struct {
	// URL is the pool's URL as the donor gave it; Name what it reports.
	URL  string `json:"url"`
	Name string `json:"name,omitempty"`
	// Error says, for people, why the pool's board could not be read;
	// "" when it was.
	Error string `json:"error,omitempty"`
	// Offer is this machine's offer to the pool (unsigned), what the jobs
	// were matched against; nil when Error is set.
	Offer *offers.Offer `json:"offer,omitempty"`
	// Jobs are the pool's listings, best first (offers.RankJobs), those
	// that match this machine before those that do not.
	Jobs []BoardJob `json:"jobs"`
}

// BoardJob is one listing on a PoolBoard.
type BoardJob struct {
	Listing offers.Listing `json:"listing"`
	// Match reports whether this machine's offer and the job match
	// (offers.Match); Why says why not, one reason per item.
	Match bool     `json:"match"`
	Why   []string `json:"why"`
}
