package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/task"
)

// onsagerTc is the exact critical temperature of the infinite square
// lattice, 2/ln(1+√2).
var onsagerTc = 2 / math.Log(1+math.Sqrt2)

// onsagerEnergy is the exact energy per spin of the infinite lattice
// (Onsager 1944): u = -coth(2K) [1 + (2/π)(2 tanh²(2K) - 1) K₁(κ)] with
// K = 1/T, κ = 2 sinh(2K)/cosh²(2K) and K₁ the complete elliptic integral
// of the first kind, computed by the arithmetic-geometric mean.
func onsagerEnergy(T float64) float64 {
	k2 := 2 / T
	kappa := 2 * math.Sinh(k2) / (math.Cosh(k2) * math.Cosh(k2))
	a, b := 1.0, math.Sqrt(1-kappa*kappa)
	for math.Abs(a-b) > 1e-15 {
		a, b = (a+b)/2, math.Sqrt(a*b)
	}
	ellipticK := math.Pi / (2 * a)
	th := math.Tanh(k2)
	return -1 / th * (1 + 2/math.Pi*(2*th*th-1)*ellipticK)
}

// onsagerMagnetisation is the exact spontaneous magnetisation per spin
// below Tc (Onsager 1949, Yang 1952): (1 - sinh(2/T)^-4)^(1/8).
func onsagerMagnetisation(T float64) float64 {
	return math.Pow(1-math.Pow(math.Sinh(2/T), -4), 0.125)
}

func TestExactLimits(t *testing.T) {
	// Far from Tc the correlation length is a few sites, so a 16×16
	// lattice is close to the infinite one, and a few thousand sweeps
	// bring the statistical error well under the tolerance.
	tests := []struct {
		name    string
		T       float64
		checkM  bool
		tolE    float64
		tolAbsM float64
	}{
		{name: "ordered T=1.5", T: 1.5, checkM: true, tolE: 0.01, tolAbsM: 0.01},
		{name: "ordered T=2.0", T: 2.0, checkM: true, tolE: 0.02, tolAbsM: 0.02},
		{name: "disordered T=3.5", T: 3.5, tolE: 0.01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := simulate(tc.T, 16, 500, 3000, 11)
			if want := onsagerEnergy(tc.T); math.Abs(m.Energy-want) > tc.tolE {
				t.Errorf("energy per spin %.4f, exact %.4f, tolerance %g", m.Energy, want, tc.tolE)
			}
			if !tc.checkM {
				return
			}
			if want := onsagerMagnetisation(tc.T); math.Abs(m.AbsM-want) > tc.tolAbsM {
				t.Errorf("|m| %.4f, exact %.4f, tolerance %g", m.AbsM, want, tc.tolAbsM)
			}
		})
	}
}

// manifest holds the values of ising.toml that the tests use.
type manifest struct {
	L, Burnin, Sweeps int
	T                 []float64
	Reps              int
}

// readManifest extracts the split parameters from ising.toml with a
// line-oriented reader that knows just this file's shape, so that the
// tests exercise the parameters the job really uses.
func readManifest(t *testing.T) manifest {
	t.Helper()
	b, err := os.ReadFile("ising.toml")
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	var list *[]float64
	var reps []float64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if list != nil { // inside a multi-line array
			*list = append(*list, parseFloats(t, strings.TrimSuffix(line, "]"))...)
			if strings.HasSuffix(line, "]") {
				list = nil
			}
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "L", "burnin", "sweeps":
			n, err := strconv.Atoi(val)
			if err != nil {
				t.Fatalf("ising.toml %s: %v", key, err)
			}
			*map[string]*int{"L": &m.L, "burnin": &m.Burnin, "sweeps": &m.Sweeps}[key] = n
		case "T", "rep":
			dst := map[string]*[]float64{"T": &m.T, "rep": &reps}[key]
			val = strings.TrimPrefix(val, "[")
			*dst = append(*dst, parseFloats(t, strings.TrimSuffix(val, "]"))...)
			if !strings.HasSuffix(val, "]") {
				list = dst
			}
		}
	}
	m.Reps = len(reps)
	if m.L == 0 || m.Sweeps == 0 || len(m.T) == 0 || m.Reps == 0 {
		t.Fatalf("ising.toml: incomplete split parameters: %+v", m)
	}
	return m
}

func parseFloats(t *testing.T, s string) []float64 {
	t.Helper()
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("ising.toml: %v", err)
		}
		out = append(out, v)
	}
	return out
}

func TestManifest(t *testing.T) {
	m := readManifest(t)
	if got := len(m.T) * m.Reps; got != 164 {
		t.Errorf("%d tasks, want 164 (41 temperatures × 4 replicas)", got)
	}
	if m.T[0] != 1.5 || m.T[len(m.T)-1] != 3.5 {
		t.Errorf("temperatures span %v..%v, want 1.5..3.5", m.T[0], m.T[len(m.T)-1])
	}
}

// TestSusceptibilityPeak runs the manifest's lattice size and sweep
// counts at the manifest's temperatures from 2.20 to 2.50, two replicas
// each, and checks that the temperature with the largest mean
// susceptibility lies within 0.1 of Onsager's Tc. For L = 32 the peak of
// chi is near T = 2.335, shifted above Tc by the finite lattice, so on the
// 0.05 grid it falls on 2.30 or 2.35.
func TestSusceptibilityPeak(t *testing.T) {
	const tolerance, reps = 0.1, 2
	m := readManifest(t)
	var peakT, peakChi float64
	for i, T := range m.T {
		if T < 2.2 || T > 2.5 {
			continue
		}
		var chi float64
		for r := range reps {
			chi += simulate(T, m.L, m.Burnin, m.Sweeps, uint64(1000+10*i+r)).Chi / reps
		}
		t.Logf("T=%.2f mean chi=%.3f", T, chi)
		if chi > peakChi {
			peakT, peakChi = T, chi
		}
	}
	if d := math.Abs(peakT - onsagerTc); d > tolerance {
		t.Errorf("susceptibility peaks at T=%.2f, %.3f from Tc=%.4f; tolerance %g", peakT, d, onsagerTc, tolerance)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	a := simulate(2.3, 8, 10, 100, 5)
	if diff := cmp.Diff(a, simulate(2.3, 8, 10, 100, 5)); diff != "" {
		t.Errorf("same seed, different measurement (-first +second):\n%s", diff)
	}
	if b := simulate(2.3, 8, 10, 100, 6); b == a {
		t.Errorf("seeds 5 and 6 gave identical measurements %+v", a)
	}
}

func TestRun(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		stdin := `{"job":"ab","index":3,"seed":18446744073709551615,"params":{"T":2.25,"L":4,"burnin":2,"sweeps":10,"rep":3}}`
		m := simulate(2.25, 4, 2, 10, 18446744073709551615)
		want, err := json.Marshal(result{T: 2.25, Rep: 3, Energy: m.Energy, AbsM: m.AbsM, Chi: m.Chi})
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := task.Run(strings.NewReader(stdin), &stdout, &stderr, compute); code != 0 {
			t.Fatalf("exit code %d, stderr %q", code, stderr.String())
		}
		if diff := cmp.Diff(string(want)+"\n", stdout.String()); diff != "" {
			t.Errorf("stdout (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(stdout.String(), `{"T":2.25,"rep":3,"energy":`) {
			t.Errorf("stdout %q does not start with T, rep, energy", stdout.String())
		}
	})

	tests := []struct {
		name    string
		stdin   string
		wantErr string
	}{
		{"no T", `{"params":{"L":8,"sweeps":10}}`, "params.T must be a temperature"},
		{"negative T", `{"params":{"T":-1,"L":8,"sweeps":10}}`, "params.T must be a temperature"},
		{"tiny L", `{"params":{"T":2,"L":1,"sweeps":10}}`, "params.L must be in"},
		{"no sweeps", `{"params":{"T":2,"L":8}}`, "params.sweeps must be at least 1"},
		{"negative burnin", `{"params":{"T":2,"L":8,"sweeps":1,"burnin":-1}}`, "params.burnin must not be negative"},
		{"too long", `{"params":{"T":2,"L":4096,"sweeps":1000000}}`, "overflow"},
		{"string L", `{"params":{"T":2,"L":"8","sweeps":1}}`, "decode params"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := task.Run(strings.NewReader(tc.stdin), &stdout, &stderr, compute); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.wantErr)
			}
		})
	}
}

// TestSweepMatchesReference checks the sweep, whose generator and
// neighbours are laid out for WebAssembly, against the plain form it
// replaced: math/rand/v2's PCG through its methods and every neighbour
// wrapped by index. The lattices, energies, magnetisations and the
// generators' states must stay equal sweep by sweep, on lattices from
// the smallest side up, at temperatures on both sides of Tc.
func TestSweepMatchesReference(t *testing.T) {
	for _, L := range []int{2, 3, 5, 16} {
		for _, T := range []float64{1.5, 2.27, 3.5} {
			lat := newLattice(T, L, 42)
			ref := referenceLattice{lattice: *newLattice(T, L, 42), rng: rand.NewPCG(42, pcgStream)}
			ref.spins = slices.Clone(lat.spins)
			for i := range 50 {
				lat.sweep()
				ref.sweep()
				if !slices.Equal(lat.spins, ref.spins) || lat.energy != ref.energy || lat.mag != ref.mag || lat.draw != ref.draw || lat.half != ref.half {
					t.Fatalf("L=%d T=%v: sweep %d differs from the reference", L, T, i)
				}
			}
			if got, want := pcgOutput(pcgNext(lat.rng.hi, lat.rng.lo)), ref.rng.Uint64(); got != want {
				t.Fatalf("L=%d T=%v: the generators parted: next draw %#x, reference %#x", L, T, got, want)
			}
		}
	}
}

// referenceLattice is the sweep as it was written first.
type referenceLattice struct {
	lattice
	rng *rand.PCG
}

func (lat *referenceLattice) sweep() {
	L, spins, thr, rng := lat.side, lat.spins, lat.thr, lat.rng
	for r := range L {
		for c := range L {
			s := spins[r*L+c]
			nb := spins[r*L+(c+L-1)%L] + spins[r*L+(c+1)%L] + spins[((r+L-1)%L)*L+c] + spins[((r+1)%L)*L+c]
			dE := 2 * s * nb
			if dE > 0 {
				var u uint32
				if lat.half {
					u, lat.half = uint32(lat.draw>>32), false
				} else {
					lat.draw = rng.Uint64()
					u, lat.half = uint32(lat.draw), true
				}
				if u >= thr[dE>>2] {
					continue
				}
			}
			spins[r*L+c] = -s
			lat.energy += int64(dE)
			lat.mag -= int64(2 * s)
		}
	}
}
