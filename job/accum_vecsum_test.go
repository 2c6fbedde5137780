package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestVectorSumShardInvariant checks the property a training round rests
// on: the same integer vectors, cut into any number of shards (each shard
// merged on its own, round tripped through its binary state) and merged in
// any order, give byte-identical results, equal to the exact sums.
func TestVectorSumShardInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 1))
	const n, width = 200, 5
	spec := MergeSpec{Name: "g", Rule: RuleVectorSum, Field: "grad"}
	results := make([][]byte, n)
	exact := make([]*big.Int, width)
	for i := range exact {
		exact[i] = new(big.Int)
	}
	for i := range results {
		v := make([]int64, width)
		for j := range v {
			switch rng.IntN(3) {
			case 0:
				v[j] = math.MaxInt64 - rng.Int64N(3)
			case 1:
				v[j] = math.MinInt64 + rng.Int64N(3)
			default:
				v[j] = rng.Int64() - rng.Int64()
			}
			exact[j].Add(exact[j], big.NewInt(v[j]))
		}
		results[i], _ = json.Marshal(map[string]any{"grad": v})
	}
	var want strings.Builder
	want.WriteString(`{"g":{"count":200,"sum":[`)
	for j, e := range exact {
		if j > 0 {
			want.WriteString(",")
		}
		want.WriteString(e.String())
	}
	want.WriteString(`]}}`)
	for _, shards := range []int{1, 3, 8, 64} {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			parts := make([]*Merger, shards)
			for i := range parts {
				parts[i] = mergerFor(t, spec)
			}
			for _, i := range rng.Perm(n) {
				if err := parts[i%shards].Add(int64(i), results[i]); err != nil {
					t.Fatal(err)
				}
			}
			total := mergerFor(t, spec)
			for _, k := range rng.Perm(shards) {
				fresh := mergerFor(t, spec)
				if err := fresh.UnmarshalBinary(mustMarshalState(t, parts[k])); err != nil {
					t.Fatal(err)
				}
				if err := total.Merge(fresh); err != nil {
					t.Fatal(err)
				}
			}
			if got := resultText(t, total); got != want.String() {
				t.Fatalf("result\\n got %s\\nwant %s", got, want.String())
			}
		})
	}
}

func TestVectorSumRejects(t *testing.T) {
	spec := MergeSpec{Name: "g", Rule: RuleVectorSum, Field: "grad"}
	for _, tc := range []struct{ name, first, result, want string }{
		{"fraction", "", `{"grad":[1,0.5]}`, `merge "g": field grad: want integers (fixed point), got a number with a fraction or exponent`},
		{"exponent", "", `{"grad":[1e3]}`, `merge "g": field grad: want integers (fixed point), got a number with a fraction or exponent`},
		{"too wide", "", `{"grad":[9223372036854775808]}`, `merge "g": field grad: want integers that fit 64 bits, got a larger one`},
		{"empty", "", `{"grad":[]}`, `merge "g": field grad: want a non-empty array of integers`},
		{"not an array", "", `{"grad":3}`, `merge "g": field grad: want an array of numbers, got number`},
		{"length changes", `{"grad":[1,2]}`, `{"grad":[1,2,3]}`, `merge "g": field grad: want 2 integers, as in earlier results, got 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mergerFor(t, spec)
			if tc.first != "" {
				if err := m.Add(0, []byte(tc.first)); err != nil {
					t.Fatal(err)
				}
			}
			err := m.Add(1, []byte(tc.result))
			if !errors.Is(err, ErrBadResult) || err.Error() != tc.want {
				t.Fatalf("Add(%s) = %v, want %q", tc.result, err, tc.want)
			}
		})
	}
}
