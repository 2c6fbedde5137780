package offers_test

import (
	"fmt"
	"time"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// A CPU-only machine that keeps night hours, and a job that needs a GPU.
func ExampleMatch() {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC) // a Monday
	hours, _ := idle.ParseSchedule("Mon-Fri 22:00-07:00")
	o := offers.Build(offers.Spec{
		Pool: "lab", Peer: "idpeer", Owner: "iddonor",
		Capacity: idle.Capacity{Cores: 7, MemoryMiB: 8192, Schedule: hours, TimeZone: "UTC"},
		Issued:   now,
	})
	l := offers.Listing{Name: "render", Owner: "idowner", Pool: "lab", MemoryMiB: 2048,
		Requirements: job.Requirements{GPU: job.GPURequired, GPUMemoryMiB: 8192}}
	ok, why := offers.Match(o, l, now)
	fmt.Println(ok)
	for _, w := range why {
		fmt.Println(w)
	}
	// Output:
	// false
	// needs a GPU with 8 GiB; this machine offers none
	// needs a GPU program; you have not allowed GPU programs in this pool
	// outside this machine's hours (next: Mon 22:00)
}
