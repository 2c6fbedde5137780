package job

import (
	"fmt"
	"time"
)

// Verify is the [verify] table: how much checking the job's owner asks
// for beyond the policy's quorum. The zero value asks for none: every task
// is replicated to policy.redundancy and accepted by policy.quorum
// distinct owners.
//
// With MinQuorum below policy.quorum the pool uses adaptive replication
// (as BOINC does, see its wiki page AdaptiveReplication): a device that
// has returned TrustAfter consecutive results of this program that other
// owners agreed with computes a task alone (MinQuorum replicas) with
// probability 1 − SpotCheck, and is checked as usual with probability
// SpotCheck, chosen by the coordinator from a secret when it leases the
// task, so that a device cannot tell a checked task from an unchecked one.
// Results computed alone are held back from the merge until their check
// window closes (see RATIONALE.md, "Adaptive replication").
type Verify struct {
	// MinQuorum is the floor: 1 lets a trusted device compute a task
	// alone; equal to policy.quorum (or 0, the default) always
	// replicates.
	MinQuorum int `toml:"min_quorum"`
	// SpotCheck is the probability, 0 <= p <= 1, that a trusted device's
	// task is still replicated; nil (not set) is DefaultSpotCheck once
	// normalised. 0 never replicates a trusted device's task (its results
	// wait for their check window or a known answer); 1 is the same as
	// always replicating. Read it with SpotCheckShare.
	SpotCheck *float64 `toml:"spot_check"`
	// TrustAfter is how many consecutive agreed results of this program a
	// device needs before it computes tasks alone; default
	// DefaultTrustAfter.
	TrustAfter int `toml:"trust_after"`
	// CheckWindow bounds how long a result computed alone waits for a
	// later spot check of its device to pass before it is checked by a
	// second replica instead; default DefaultCheckWindow.
	CheckWindow Duration `toml:"check_window"`

	// Rule says when two replicas agree: RuleDigest ("digest", the
	// default; "" after normalising) when they returned the same bytes,
	// RuleTolerance ("tolerance") when the fields declared in Tolerance
	// are within their tolerances and the rest is the same (see Agree).
	Rule string `toml:"rule"`
	// Tolerance is the [verify.tolerance] table as written: a field path
	// = { abs = A, rel = R }. Normalising reads it into Tolerances.
	Tolerance map[string]any `toml:"tolerance"`
	// Tolerances maps a dotted field path of the result ("price",
	// "stats.mean") to its tolerance; filled from Tolerance when the
	// manifest is loaded.
	Tolerances map[string]Tolerance `toml:"-"`
	// KnownAnswers is the path of a JSON file mapping task indexes to the
	// SHA-256 of their results, which the submitter knows ("" for none),
	// or, under rule = "tolerance", to the results themselves: a replica
	// whose result does not agree with the known one by the job's rule
	// (Job.CheckKnown) deviated, whatever other replicas say (known-answer spot checks; see
	// RATIONALE.md). It is not part of the job's encoding, so neither its
	// ID nor its tasks' seeds depend on it (the submitter learns the
	// answers by running those tasks of this very job), and peers never
	// see it: submit hands it to the coordinator beside the job.
	KnownAnswers string `toml:"known_answers"`
}

// Defaults of the [verify] table when min_quorum is below the quorum.
const (
	DefaultSpotCheck   = 0.1
	DefaultTrustAfter  = 10
	DefaultCheckWindow = time.Hour
)

// Adaptive reports whether the job lets trusted devices compute tasks
// alone: [verify] min_quorum is set and below policy.quorum.
func (m *Manifest) Adaptive() bool {
	return m.Verify.MinQuorum > 0 && m.Verify.MinQuorum < m.Policy.Quorum
}

// adaptiveZero reports whether the table asks for no adaptive
// replication (none of min_quorum, spot_check, trust_after, check_window).
func (v *Verify) adaptiveZero() bool {
	return v.MinQuorum == 0 && v.SpotCheck == nil && v.TrustAfter == 0 && v.CheckWindow.Duration == 0
}

// normalise checks the table against the policy and fills defaults; a
// table that asks for nothing stays zero, so the job's ID stays what it
// was before the table existed.
func (v *Verify) normalise(m *Manifest) error {
	if v.KnownAnswers != "" {
		v.KnownAnswers = m.resolve(v.KnownAnswers)
	}
	var errs ManifestErrors
	errs.add(m.Path, v.normaliseRule(m))
	if v.adaptiveZero() { // known_answers and the rule are not adaptive replication
		return errs.err()
	}
	if v.MinQuorum < 0 || v.MinQuorum > m.Policy.Quorum {
		errs.add(m.Path, m.fail("verify.min_quorum", "want 1..policy.quorum (%d), got %d: it is the least number of agreeing replicas a task may be accepted with",
			m.Policy.Quorum, v.MinQuorum))
	}
	if v.SpotCheck != nil && !(*v.SpotCheck >= 0 && *v.SpotCheck <= 1) {
		errs.add(m.Path, m.fail("verify.spot_check", "want a probability from 0 (never check a trusted device) to 1 (always), such as 0.1, got %v", *v.SpotCheck))
	}
	if v.TrustAfter < 0 {
		errs.add(m.Path, m.fail("verify.trust_after", "want a number of results, at least 1, got %d", v.TrustAfter))
	}
	if v.CheckWindow.Duration < 0 || v.CheckWindow.Duration%time.Millisecond != 0 {
		errs.add(m.Path, m.fail("verify.check_window", "want a positive duration in whole milliseconds such as \"30m\", got %s", v.CheckWindow.Duration))
	}
	if len(errs) > 0 {
		return errs.err()
	}
	if v.MinQuorum == 0 {
		v.MinQuorum = m.Policy.Quorum
	}
	if v.SpotCheck == nil {
		p := DefaultSpotCheck
		v.SpotCheck = &p
	}
	if v.TrustAfter == 0 {
		v.TrustAfter = DefaultTrustAfter
	}
	if v.CheckWindow.Duration == 0 {
		v.CheckWindow.Duration = DefaultCheckWindow
	}
	return nil
}

// normaliseRule checks rule and the tolerance table. "digest" becomes ""
// (the default: the same job whether written or not).
func (v *Verify) normaliseRule(m *Manifest) error {
	switch v.Rule {
	case "", RuleDigest:
		v.Rule = ""
		if len(v.Tolerance) > 0 {
			return m.fail("verify.tolerance", "tolerances apply only with rule = \"tolerance\" in [verify]: add it, or remove [verify.tolerance]")
		}
		return nil
	case RuleTolerance:
	default:
		return m.fail("verify.rule", "want \"digest\" (replicas agree when their bytes are equal, the default) or \"tolerance\" (declared fields within [verify.tolerance]), got %q", v.Rule)
	}
	tols, err := m.parseTolerances(v.Tolerance)
	if err != nil {
		return err
	}
	if len(tols) == 0 {
		return m.fail("verify.tolerance", "rule = \"tolerance\" needs at least one field in [verify.tolerance], such as price = { abs = 1e-3, rel = 1e-3 }")
	}
	v.Tolerances = tols
	return nil
}

// canonical returns the table's part of the job's canonical encoding, or
// nil when it asks for nothing (absent: older IDs stay valid). The rule
// and tolerances are present only when rule = "tolerance", so jobs that
// do not set it keep their IDs.
func (v Verify) canonical() map[string]any {
	v.KnownAnswers = "" // not part of the job: see KnownAnswers
	if v.adaptiveZero() && v.Rule == "" {
		return nil
	}
	doc := map[string]any{}
	if !v.adaptiveZero() {
		doc["min_quorum"] = int64(v.MinQuorum)
		doc["spot_check"] = v.SpotCheckShare()
		doc["trust_after"] = int64(v.TrustAfter)
		doc["check_window_ms"] = v.CheckWindow.Milliseconds()
	}
	if v.Rule != "" {
		doc["rule"] = v.Rule
		tols := map[string]any{}
		for path, t := range v.Tolerances {
			tols[path] = map[string]any{"abs": t.Abs, "rel": t.Rel}
		}
		doc["tolerance"] = tols
	}
	return doc
}

// verifyFromCanonical reads the table back from a canonical encoding.
func verifyFromCanonical(doc map[string]any) (Verify, error) {
	t, ok := doc["verify"].(map[string]any)
	if !ok {
		return Verify{}, nil
	}
	num := func(k string) int64 { n, _ := t[k].(int64); return n }
	v := Verify{MinQuorum: int(num("min_quorum")), TrustAfter: int(num("trust_after")),
		CheckWindow: Duration{time.Duration(num("check_window_ms")) * time.Millisecond}}
	v.Rule, _ = t["rule"].(string)
	v.Tolerance, _ = t["tolerance"].(map[string]any)
	if _, ok := t["spot_check"]; !ok && v.Rule != "" {
		return v, nil
	}
	switch p := t["spot_check"].(type) {
	case float64:
		v.SpotCheck = &p
	case int64:
		f := float64(p)
		v.SpotCheck = &f
	default:
		return Verify{}, fmt.Errorf("verify.spot_check: want a number, got %T", p)
	}
	return v, nil
}

// SpotCheckShare is the spot-check probability: SpotCheck, or
// DefaultSpotCheck when it is not set.
func (v Verify) SpotCheckShare() float64 {
	if v.SpotCheck == nil {
		return DefaultSpotCheck
	}
	return *v.SpotCheck
}
