// Package energy measures what a donation costs in energy: the CPU
// packages' energy counters of Linux's powercap interface (RAPL) or of
// Windows' Energy Meter performance counters (EMI, through pdh.dll), the
// GPUs' energy counters or power readings through NVML (a GPUReader that
// package worker implements), and, where nothing can be read, an estimate
// from CPU time and the processor's rated power, always marked as one.
//
// A Meter samples those counters only while tasks run, subtracts an idle
// baseline and splits a package's energy between this device's worker
// processes and other programs by CPU time, and hands each task its
// Usage: joules per device, how they were obtained (How) and the span.
// Tariff and CO2 intensity turn joules into money and grams; Limits
// hold the donor's caps (DESIGN.md invariant 20: a donation's cost is
// shown as it was measured, and never enters a receipt's cost).
//
//	m := energy.NewMeter(energy.Config{RAPL: r, Proc: "/proc", PIDs: workers.PIDs})
//	go m.Serve(ctx)
//	t := m.Start(gpus)
//	res, _ := workers.Run(ctx, req)
//	u := t.Stop(res.PID) // u.CPU.Joules, u.CPU.How
//
// A Meter is safe for concurrent use. The package imports no other
// project package.
package energy
