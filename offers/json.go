package offers

import (
	"encoding/json"
	"fmt"

	"idlepool/job"
)

// hexID is a job ID that JSON writes as 64 hex digits (job.ID alone would
// be an array of 32 numbers).
type hexID job.ID

func (h hexID) MarshalText() ([]byte, error) { return []byte(job.ID(h).String()), nil }

func (h *hexID) UnmarshalText(b []byte) error {
	d, err := job.ParseDigest(string(b))
	if err != nil {
		return fmt.Errorf("job ID: %w", err)
	}
	*h = hexID(d)
	return nil
}

func hexIDs(s []job.ID) []hexID {
	if s == nil {
		return nil
	}
	out := make([]hexID, len(s))
	for i, id := range s {
		out[i] = hexID(id)
	}
	return out
}

func jobIDs(s []hexID) []job.ID {
	if s == nil {
		return nil
	}
	out := make([]job.ID, len(s))
	for i, id := range s {
		out[i] = job.ID(id)
	}
	return out
}

// The outer fields of these wrappers shadow the embedded ones of the same
// JSON name (encoding/json prefers the shallower field).
type (
	plainListing Listing
	listingJSON  struct {
		plainListing
		Job hexID `json:"job"`
	}
	plainAccept Accept
	acceptJSON  struct {
		plainAccept
		RefuseJobs []hexID `json:"refuse_jobs,omitempty"`
		AcceptJobs []hexID `json:"accept_jobs,omitempty"`
	}
	plainPoolPreferences PoolPreferences
	poolPreferencesJSON  struct {
		plainPoolPreferences
		AcceptJobs []hexID `json:"accept_jobs,omitempty"`
		RefuseJobs []hexID `json:"refuse_jobs,omitempty"`
	}
)

// MarshalJSON writes the listing with its job ID as 64 hex digits.
func (l Listing) MarshalJSON() ([]byte, error) {
	return json.Marshal(listingJSON{plainListing(l), hexID(l.Job)})
}

// UnmarshalJSON reads what MarshalJSON writes; a job ID that is not 64
// hex digits is an error.
func (l *Listing) UnmarshalJSON(b []byte) error {
	var v listingJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Listing(v.plainListing)
	l.Job = job.ID(v.Job)
	return nil
}

// MarshalJSON writes the job IDs as 64 hex digits.
func (a Accept) MarshalJSON() ([]byte, error) {
	return json.Marshal(acceptJSON{plainAccept(a), hexIDs(a.RefuseJobs), hexIDs(a.AcceptJobs)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Accept) UnmarshalJSON(b []byte) error {
	var v acceptJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*a = Accept(v.plainAccept)
	a.RefuseJobs, a.AcceptJobs = jobIDs(v.RefuseJobs), jobIDs(v.AcceptJobs)
	return nil
}

// MarshalJSON writes the job IDs as 64 hex digits.
func (p PoolPreferences) MarshalJSON() ([]byte, error) {
	return json.Marshal(poolPreferencesJSON{plainPoolPreferences(p), hexIDs(p.AcceptJobs), hexIDs(p.RefuseJobs)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *PoolPreferences) UnmarshalJSON(b []byte) error {
	var v poolPreferencesJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = PoolPreferences(v.plainPoolPreferences)
	p.AcceptJobs, p.RefuseJobs = jobIDs(v.AcceptJobs), jobIDs(v.RefuseJobs)
	return nil
}
