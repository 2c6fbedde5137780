package store

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"idlepool/energy"
	"idlepool/job"
)

// TaskEnergy is the energy one task this device computed added, as the
// local store keeps it (schema migrations/local/0009_task_energy.sql).
// It is the donor's own measurement: shown locally, never part of a
// receipt's cost (DESIGN.md invariants 12 and 20).
type TaskEnergy struct {
	Lease string `json:"lease"`
	Pool  string `json:"pool"`
	Job   job.ID `json:"job"`
	Task  int64  `json:"task"`
	energy.Usage
}

// AddEnergy records what one task used. It is idempotent by lease: a
// second record of the same lease changes nothing. A Usage with an
// unknown How is an error.
func (l *Local) AddEnergy(ctx context.Context, e TaskEnergy) error {
	if e.Lease == "" || e.Pool == "" {
		return fmt.Errorf("add task energy: empty lease or pool")
	}
	type row struct {
		device string
		f      energy.Figure
	}
	rows := []row{{"cpu", e.CPU}}
	for _, g := range e.GPUs {
		rows = append(rows, row{g.UUID, g.Figure})
	}
	for _, r := range rows {
		if !r.f.How.Valid() || r.f.Joules < 0 {
			return fmt.Errorf("add task energy %s: %s: %g J %q is not a figure", e.Lease, r.device, r.f.Joules, r.f.How)
		}
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add task energy %s: %w", e.Lease, classify(err))
	}
	defer tx.Rollback()
	day := e.End.In(time.Local).Format(time.DateOnly)
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO task_energy
			(lease, device, pool, job, task, joules, how, started, ended, day) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(lease, device) DO NOTHING`,
			e.Lease, r.device, e.Pool, e.Job[:], e.Task, r.f.Joules, string(r.f.How),
			e.Start.UnixMilli(), e.End.UnixMilli(), day); err != nil {
			return fmt.Errorf("add task energy %s: %w", e.Lease, classify(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add task energy %s: %w", e.Lease, classify(err))
	}
	return nil
}

// Energy returns the tasks that ended at or after since, oldest first.
func (l *Local) Energy(ctx context.Context, since time.Time) ([]TaskEnergy, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT lease, device, pool, job, task, joules, how, started, ended
		FROM task_energy WHERE ended >= ? ORDER BY ended, lease, device`, since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("read task energy: %w", classify(err))
	}
	defer rows.Close()
	var out []TaskEnergy
	byLease := map[string]int{}
	for rows.Next() {
		var e TaskEnergy
		var device, how string
		var jobID []byte
		var joules float64
		var started, ended int64
		if err := rows.Scan(&e.Lease, &device, &e.Pool, &jobID, &e.Task, &joules, &how, &started, &ended); err != nil {
			return nil, fmt.Errorf("read task energy: %w", classify(err))
		}
		i, ok := byLease[e.Lease]
		if !ok {
			copy(e.Job[:], jobID)
			e.Start, e.End = time.UnixMilli(started), time.UnixMilli(ended)
			out = append(out, e)
			i = len(out) - 1
			byLease[e.Lease] = i
		}
		f := energy.Figure{Joules: joules, How: energy.How(how)}
		if device == "cpu" {
			out[i].CPU = f
		} else {
			out[i].GPUs = append(out[i].GPUs, energy.GPUFigure{UUID: device, Figure: f})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read task energy: %w", classify(err))
	}
	return out, nil
}

// EnergyPrices is how a donor turns joules into money and CO2: a tariff
// (unset: no cost shown), the grams of CO2 per kWh (0:
// energy.DefaultCO2GramsPerKWh) and the zone whose hours the tariff
// names.
type EnergyPrices struct {
	Tariff    energy.Tariff
	CO2PerKWh float64
	Location  *time.Location
}

// EnergyDay is what one pool's tasks that ended on one local day used,
// priced.
type EnergyDay struct {
	Pool  string `json:"pool"`
	Day   string `json:"day"` // YYYY-MM-DD, local time
	Tasks int64  `json:"tasks"`
	// Joules and KWh are the energy the tasks added; How is the least
	// exact of their figures.
	Joules float64    `json:"joules"`
	KWh    float64    `json:"kwh"`
	How    energy.How `json:"how"`
	// Cost is KWh at the tariff, each task's energy spread evenly over
	// its span and each part priced at its hour; absent without a
	// tariff.
	Cost     *float64 `json:"cost,omitempty"`
	Currency string   `json:"currency,omitempty"`
	// CO2Grams is KWh at the donor's intensity.
	CO2Grams float64 `json:"co2_grams"`
}

// EnergyHistory sums Energy per pool and local day (pool, then day
// ascending) and prices it.
func (l *Local) EnergyHistory(ctx context.Context, p EnergyPrices) ([]EnergyDay, error) {
	tasks, err := l.Energy(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	return SumEnergy(tasks, p), nil
}

// SumEnergy sums tasks per pool and day of their end in time.Local and
// prices them (see EnergyHistory).
func SumEnergy(tasks []TaskEnergy, p EnergyPrices) []EnergyDay {
	loc := p.Location
	if loc == nil {
		loc = time.Local
	}
	type key struct{ pool, day string }
	sums := map[key]*EnergyDay{}
	for _, t := range tasks {
		k := key{t.Pool, t.End.In(time.Local).Format(time.DateOnly)}
		d := sums[k]
		if d == nil {
			d = &EnergyDay{Pool: k.pool, Day: k.day}
			if p.Tariff.IsSet() {
				d.Cost, d.Currency = new(float64), p.Tariff.Currency
			}
			sums[k] = d
		}
		j := t.Joules()
		d.Tasks++
		d.Joules += j
		d.How = d.How.Worse(t.How())
		if d.Cost != nil {
			*d.Cost += p.Tariff.Cost(j, t.Start, t.End, loc)
		}
	}
	out := make([]EnergyDay, 0, len(sums))
	for _, d := range sums {
		d.KWh = energy.KWh(d.Joules)
		d.CO2Grams = energy.CO2Grams(d.Joules, p.CO2PerKWh)
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pool != out[j].Pool {
			return out[i].Pool < out[j].Pool
		}
		return out[i].Day < out[j].Day
	})
	return out
}

// EnergySince is the joules of the tasks that ended at or after since:
// what a daily or monthly cap counts.
func (l *Local) EnergySince(ctx context.Context, since time.Time) (float64, error) {
	var j float64
	if err := l.db.QueryRowContext(ctx, `SELECT TOTAL(joules) FROM task_energy WHERE ended >= ?`, since.UnixMilli()).Scan(&j); err != nil {
		return 0, fmt.Errorf("read task energy: %w", classify(err))
	}
	return j, nil
}

var _ energy.BaselineStore = (*Local)(nil)

// LoadBaseline returns the energy meter's stored idle baseline
// (energy.BaselineStore); a zero Baseline when none was stored. Its At
// is the latest of the devices' times.
func (l *Local) LoadBaseline(ctx context.Context) (energy.Baseline, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT device, watts, measured FROM energy_baseline`)
	if err != nil {
		return energy.Baseline{}, fmt.Errorf("read the energy baseline: %w", classify(err))
	}
	defer rows.Close()
	var b energy.Baseline
	for rows.Next() {
		var device string
		var w float64
		var at int64
		if err := rows.Scan(&device, &w, &at); err != nil {
			return energy.Baseline{}, fmt.Errorf("read the energy baseline: %w", classify(err))
		}
		if device == "cpu" {
			b.CPUW, b.CPUKnown = w, true
		} else {
			if b.GPUW == nil {
				b.GPUW = map[string]float64{}
			}
			b.GPUW[device] = w
		}
		if t := time.UnixMilli(at); t.After(b.At) {
			b.At = t
		}
	}
	if err := rows.Err(); err != nil {
		return energy.Baseline{}, fmt.Errorf("read the energy baseline: %w", classify(err))
	}
	return b, nil
}

// SaveBaseline replaces the stored idle baseline by b
// (energy.BaselineStore). A negative or non-finite draw is an error
// naming the device, and nothing is saved.
func (l *Local) SaveBaseline(ctx context.Context, b energy.Baseline) error {
	rows := map[string]float64{}
	if b.CPUKnown {
		rows["cpu"] = b.CPUW
	}
	for uuid, w := range b.GPUW {
		if uuid == "" || uuid == "cpu" {
			return fmt.Errorf("save the energy baseline: GPU UUID %q", uuid)
		}
		rows[uuid] = w
	}
	for d, w := range rows {
		if !(w >= 0) || math.IsInf(w, 0) {
			return fmt.Errorf("save the energy baseline: %s draws %g W: want 0 or more", d, w)
		}
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("save the energy baseline: %w", classify(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM energy_baseline`); err != nil {
		return fmt.Errorf("save the energy baseline: %w", classify(err))
	}
	for d, w := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO energy_baseline(device, watts, measured) VALUES (?, ?, ?)`, d, w, b.At.UnixMilli()); err != nil {
			return fmt.Errorf("save the energy baseline: %w", classify(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("save the energy baseline: %w", classify(err))
	}
	return nil
}
