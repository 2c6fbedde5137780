package job

import (
	"encoding/json"
	"fmt"
	"os"
)

// A Monte Carlo estimate of pi: every task counts the random points that
// fall inside the unit circle, and the merge sums the counts exactly.
func ExampleMerger() {
	m, err := NewMerger([]MergeSpec{
		{Rule: "sum", Field: "inside"},
		{Rule: "sum", Field: "samples"},
		{Name: "hits", Rule: "stats", Field: "inside"},
	}, nil)
	if err != nil {
		panic(err)
	}
	// Results arrive in any order.
	for _, r := range []struct {
		task   int64
		result string
	}{
		{2, `{"inside":7851,"samples":10000}`},
		{0, `{"inside":7862,"samples":10000}`},
		{1, `{"inside":7849,"samples":10000}`},
	} {
		if err := m.Add(r.task, []byte(r.result)); err != nil {
			panic(err)
		}
	}
	out, _ := json.Marshal(m.Result())
	fmt.Println(string(out))
	s := m.Scalars()
	fmt.Println("pi ≈", 4*s["inside"]/s["samples"])
	// Output:
	// {"inside":{"count":3,"sum":23562},"samples":{"count":3,"sum":30000},"hits":{"count":3,"sum":23562,"mean":7854,"variance":32.666666666666664,"sample_variance":49,"stddev":5.715476066494082,"sample_stddev":7,"min":7849,"max":7862}}
	// pi ≈ 3.1416
}

// Two peers each fold part of a run; their states travel as bytes and
// merge into the same answer as one Merger that saw every result.
func ExampleMerger_Merge() {
	specs := []MergeSpec{{Name: "update", Rule: "vector-mean", Field: "grad"}}
	peerA, _ := NewMerger(specs, nil)
	peerB, _ := NewMerger(specs, nil)
	_ = peerA.Add(0, []byte(`{"grad":[0.1, -2, 1e-300]}`))
	_ = peerB.Add(1, []byte(`{"grad":[0.2, 4, 1e300]}`))
	_ = peerB.Add(2, []byte(`{"grad":[0.3, 1, -1e300]}`))

	state, _ := peerB.MarshalBinary() // sent from B to A
	fromB, _ := NewMerger(specs, nil)
	if err := fromB.UnmarshalBinary(state); err != nil {
		panic(err)
	}
	if err := peerA.Merge(fromB); err != nil {
		panic(err)
	}
	// The exact sums make the mean of 0.1, 0.2 and 0.3 come out as 0.2
	// (float64 addition gives 0.20000000000000004), and 1e-300 survives
	// next to ±1e300.
	_ = json.NewEncoder(os.Stdout).Encode(peerA.Result())
	// Output:
	// {"update":{"count":3,"mean":[0.2,1,3.3333333333333334e-301]}}
}
