package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"idlepool/examples/internal/task"
)

// blackScholesCall is the Black–Scholes (1973) price of a European call:
// s0·N(d1) − strike·exp(−rate·maturity)·N(d2), N the standard normal CDF.
func blackScholesCall(s0, strike, rate, sigma, maturity float64) float64 {
	n := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	sd := sigma * math.Sqrt(maturity)
	d1 := (math.Log(s0/strike) + (rate+sigma*sigma/2)*maturity) / sd
	d2 := d1 - sd
	return s0*n(d1) - strike*math.Exp(-rate*maturity)*n(d2)
}

func TestBlackScholesCall(t *testing.T) {
	// Hull, "Options, Futures, and Other Derivatives", example 15.6 (8th
	// ed.): s0 = 42, strike 40, rate 10%, sigma 20%, half a year: 4.76.
	if got := blackScholesCall(42, 40, 0.1, 0.2, 0.5); math.Abs(got-4.7594) > 1e-4 {
		t.Errorf("Hull's example: %.6f, want 4.7594", got)
	}
	if got := blackScholesCall(100, 100, 0.05, 0.2, 1); math.Abs(got-10.450584) > 1e-6 {
		t.Errorf("at the money: %.7f, want 10.450584", got)
	}
}

// priceTasks runs tasks tasks of p through the program's shell and returns
// the mean of their prices and its standard error (the sample standard
// deviation of the task prices over sqrt(tasks)), as the manifest's merge
// and derive do.
func priceTasks(t *testing.T, p params, tasks int) (mean, se float64) {
	t.Helper()
	pj, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var sum, sumSq float64
	for i := range tasks {
		tk := task.Task{Index: i, Seed: 0x0123456789abcdef*uint64(i+1) + 17, Params: pj}
		in, _ := json.Marshal(tk)
		var stdout, stderr bytes.Buffer
		if code := task.Run(bytes.NewReader(in), &stdout, &stderr, compute); code != 0 {
			t.Fatalf("task %d: exit %d, %s", i, code, stderr.String())
		}
		var r result
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		sum += r.Price
		sumSq += r.Price * r.Price
	}
	n := float64(tasks)
	mean = sum / n
	return mean, math.Sqrt((sumSq - n*mean*mean) / (n - 1) / n)
}

// TestCPUPathMatchesBlackScholes: the CPU path's price is within 4
// standard errors of the closed form, at the money and away from it.
func TestCPUPathMatchesBlackScholes(t *testing.T) {
	tests := []struct {
		name string
		p    params
	}{
		{"at the money", params{S0: 100, Strike: 100, Rate: 0.05, Sigma: 0.2, Maturity: 1, Paths: 1 << 16}},
		{"out of the money", params{S0: 100, Strike: 120, Rate: 0.03, Sigma: 0.3, Maturity: 0.5, Paths: 1 << 16}},
		{"in the money", params{S0: 42, Strike: 40, Rate: 0.1, Sigma: 0.2, Maturity: 0.5, Paths: 1 << 16}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mean, se := priceTasks(t, tc.p, 16)
			want := blackScholesCall(tc.p.S0, tc.p.Strike, tc.p.Rate, tc.p.Sigma, tc.p.Maturity)
			if d := math.Abs(mean - want); d > 4*se || se <= 0 {
				t.Errorf("price %.5f is %.2f standard errors (se %.2g) from Black–Scholes %.5f", mean, d/se, se, want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	ok := `"s0":100,"strike":100,"rate":0.05,"sigma":0.2,"maturity":1`
	tests := []struct {
		name     string
		params   string
		wantCode int
		wantErr  string
	}{
		{"ok", ok + `,"paths":1000`, 0, ""},
		{"odd paths", ok + `,"paths":1001`, 1, "params.paths must be a positive even integer"},
		{"no paths", ok, 1, "params.paths must be a positive even integer"},
		{"zero sigma", `"s0":100,"strike":100,"rate":0.05,"sigma":0,"maturity":1,"paths":2`, 1, "params.sigma must be a positive number, got 0"},
		{"no strike", `"s0":100,"rate":0.05,"sigma":0.2,"maturity":1,"paths":2`, 1, "params.strike must be a positive number"},
		{"string s0", `"s0":"100","paths":2`, 1, "decode params"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := task.Run(strings.NewReader(`{"seed":5,"params":{`+tc.params+`}}`), &stdout, &stderr, compute)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.wantErr)
			}
			if code == 0 && !strings.HasPrefix(stdout.String(), `{"paths":1000,"price":`) {
				t.Errorf("stdout %q", stdout.String())
			}
		})
	}
}

// manifestTolerance reads [verify.tolerance] price from optionmc.toml.
func manifestTolerance(t *testing.T) (abs, rel float64) {
	t.Helper()
	b, err := os.ReadFile("optionmc.toml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Verify struct {
			Rule      string `toml:"rule"`
			Tolerance struct {
				Price struct{ Abs, Rel float64 } `toml:"price"`
			} `toml:"tolerance"`
		} `toml:"verify"`
	}
	if err := toml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Verify.Rule != "tolerance" || m.Verify.Tolerance.Price.Abs <= 0 {
		t.Fatalf("optionmc.toml: [verify] %+v, want rule = \"tolerance\" and a price tolerance", m.Verify)
	}
	return m.Verify.Tolerance.Price.Abs, m.Verify.Tolerance.Price.Rel
}
