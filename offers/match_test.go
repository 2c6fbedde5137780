package offers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/job"
)

var (
	jobA = job.ID{0xaa}
	jobB = job.ID{0xbb}
	jobC = job.ID{0xcc}
)

// monday is Monday 2 March 2026, 12:00 UTC.
var monday = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

func cpuOffer() Offer {
	return Offer{
		Peer: "idpeercpu", Owner: "iddonor", Pool: "lab",
		Capacity: idle.Capacity{OS: "linux", Arch: "amd64", LogicalCPUs: 8, Cores: 7,
			MemoryTotalMiB: 16384, MemoryMiB: 8192, GPUs: []idle.GPUOffer{}, Schedule: idle.Schedule{}, TimeZone: "UTC"},
		State: idle.StateComputing, Issued: monday.Add(-time.Minute), Expires: monday.Add(time.Minute),
	}
}

func gpuOffer() Offer {
	o := cpuOffer()
	o.Peer = "idpeergpu"
	o.Capacity.GPUs = []idle.GPUOffer{{UUID: "GPU-1", Name: "NVIDIA GeForce RTX 4070", ComputeCapability: "8.9", MemoryTotalMiB: 12282, MemoryMiB: 9211}}
	o.Accept.GPUPrograms = true
	return o
}

func cpuJob() Listing {
	return Listing{Job: jobA, Name: "pi", Owner: "idowner", Pool: "lab", MemoryMiB: 256,
		TimeLimit: 10 * time.Minute, TasksLeft: 100, Quorum: 2, Participants: "open"}
}

func gpuJob(memMiB int64, capability string) Listing {
	l := cpuJob()
	l.Job, l.Name = jobB, "render"
	l.Requirements = job.Requirements{GPU: job.GPURequired, GPUMemoryMiB: memMiB, GPUComputeCapability: capability}
	return l
}

// optionalJob can use a GPU of 16 GiB but runs anywhere (gpu = "optional").
func optionalJob() Listing {
	l := gpuJob(16384, "9.0")
	l.Requirements.GPU = job.GPUOptional
	return l
}

func TestMatch(t *testing.T) {
	berlinHours, err := idle.ParseSchedule("Mon-Fri 22:00-07:00")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		offer func(*Offer)
		base  func() Offer
		job   Listing
		now   time.Time
		want  []string // nil: matches
	}{
		{name: "CPU job on CPU-only offer", base: cpuOffer, job: cpuJob()},
		{name: "CPU job on GPU offer", base: gpuOffer, job: cpuJob()},
		{name: "GPU job on GPU offer", base: gpuOffer, job: gpuJob(8192, "8.0")},
		{name: "GPU required vs CPU-only offer", base: cpuOffer, job: gpuJob(8192, ""), offer: func(o *Offer) { o.Accept.GPUPrograms = true },
			want: []string{"needs a GPU with 8 GiB; this machine offers none"}},
		{name: "GPU required, no memory asked, CPU-only offer", base: cpuOffer, job: gpuJob(0, ""), offer: func(o *Offer) { o.Accept.GPUPrograms = true },
			want: []string{"needs a GPU; this machine offers none"}},
		{name: "GPU optional on CPU-only offer without GPU programs", base: cpuOffer, job: optionalJob()},
		{name: "GPU optional on GPU offer without GPU programs", base: gpuOffer, job: optionalJob(), offer: func(o *Offer) { o.Accept.GPUPrograms = false }},
		{name: "GPU optional on GPU offer", base: gpuOffer, job: optionalJob()},
		{name: "GPU memory too small", base: gpuOffer, job: gpuJob(16384, ""),
			want: []string{"needs a GPU with 16 GiB; the largest GPU offered has 9.0 GiB"}},
		{name: "compute capability too low", base: gpuOffer, job: gpuJob(0, "9.0"),
			want: []string{"needs a GPU with compute capability 9.0 or higher; the GPUs offered have compute capability 8.9"}},
		{name: "compute capability compared as numbers", base: gpuOffer, job: gpuJob(0, "10.0"),
			want: []string{"needs a GPU with compute capability 10.0 or higher; the GPUs offered have compute capability 8.9"}},
		{name: "no single GPU has both", base: gpuOffer, job: gpuJob(16384, "8.0"),
			offer: func(o *Offer) {
				o.Capacity.GPUs = append(o.Capacity.GPUs, idle.GPUOffer{UUID: "GPU-2", Name: "Tesla K80", ComputeCapability: "3.7", MemoryMiB: 20000})
			},
			want: []string{"needs a GPU with 16 GiB and compute capability 8.0 or higher; no GPU offered has both"}},
		{name: "second GPU fits", base: gpuOffer, job: gpuJob(16384, "8.0"),
			offer: func(o *Offer) {
				o.Capacity.GPUs = append(o.Capacity.GPUs, idle.GPUOffer{UUID: "GPU-2", Name: "A100", ComputeCapability: "8.0", MemoryMiB: 40000})
			}},
		{name: "GPU program without opt-in", base: gpuOffer, job: gpuJob(0, ""), offer: func(o *Offer) { o.Accept.GPUPrograms = false },
			want: []string{"needs a GPU program; you have not allowed GPU programs in this pool"}},
		{name: "machine memory too small", base: cpuOffer, job: func() Listing { l := cpuJob(); l.MemoryMiB = 12288; return l }(),
			want: []string{"needs 12 GiB of memory per task; this machine offers 8 GiB"}},
		{name: "memory over the donor's ceiling", base: cpuOffer, job: func() Listing { l := cpuJob(); l.MemoryMiB = 2048; return l }(),
			offer: func(o *Offer) { o.Accept.MaxMemoryMiB = 1536 },
			want:  []string{"needs 2 GiB of memory per task; you allow at most 1.5 GiB"}},
		{name: "task time over the donor's ceiling", base: cpuOffer, job: cpuJob(),
			offer: func(o *Offer) { o.Accept.MaxTaskTime = 5 * time.Minute },
			want:  []string{"a task may run 10 min; you allow at most 5 min"}},
		{name: "refused owner", base: cpuOffer, job: cpuJob(), offer: func(o *Offer) { o.Accept.RefuseOwners = []string{"idowner"} },
			want: []string{"you refused jobs of owner idowner"}},
		{name: "refused owner, job accepted explicitly", base: cpuOffer, job: cpuJob(), offer: func(o *Offer) {
			o.Accept.RefuseOwners = []string{"idowner"}
			o.Accept.AcceptJobs = []job.ID{jobA}
		}},
		{name: "refused job", base: cpuOffer, job: cpuJob(), offer: func(o *Offer) { o.Accept.RefuseJobs = []job.ID{jobC, jobA} },
			want: []string{"you refused this job"}},
		{name: "participants owner, another owner", base: cpuOffer, job: func() Listing {
			l := cpuJob()
			l.Owner, l.Participants = "idownerwithalongid", "owner"
			return l
		}(), want: []string{"only the devices of its owner idownerwit… may compute this job"}},
		{name: "participants owner, same owner", base: cpuOffer, job: func() Listing {
			l := cpuJob()
			l.Owner, l.Participants = "iddonor", "owner"
			return l
		}()},
		{name: "own job in an open pool", base: cpuOffer, job: func() Listing { l := cpuJob(); l.Owner = "iddonor"; return l }(),
			want: []string{ReasonOwnJob}},
		{name: "own job in an invite-only pool", base: cpuOffer, job: func() Listing {
			l := cpuJob()
			l.Owner, l.Participants = "iddonor", "invite"
			return l
		}(), want: []string{ReasonOwnJob}},
		{name: "hours end before a task's time limit", base: cpuOffer, job: cpuJob(),
			now: monday.Add(18*time.Hour - 79*time.Second), // Tuesday 06:58:41 in Berlin (UTC+1)
			offer: func(o *Offer) {
				o.Capacity.Schedule, o.Capacity.TimeZone = berlinHours, "Europe/Berlin"
				o.Expires = monday.Add(19 * time.Hour)
			}, want: []string{"a task may run 10 min; this machine's hours end in 1 min 19 s (at 07:00)"}},
		{name: "hours end after a task's time limit", base: cpuOffer, job: cpuJob(),
			now: monday.Add(18*time.Hour - 11*time.Minute),
			offer: func(o *Offer) {
				o.Capacity.Schedule, o.Capacity.TimeZone = berlinHours, "Europe/Berlin"
				o.Expires = monday.Add(19 * time.Hour)
			}},
		{name: "another pool", base: cpuOffer, job: func() Listing { l := cpuJob(); l.Pool = "other"; return l }(),
			want: []string{"offered to pool lab, but the job is in pool other"}},
		{name: "schedule outside hours", base: cpuOffer, job: cpuJob(), offer: func(o *Offer) {
			o.Capacity.Schedule, o.Capacity.TimeZone = berlinHours, "Europe/Berlin"
		}, want: []string{"outside this machine's hours (next: Mon 22:00)"}},
		{name: "schedule inside hours", base: cpuOffer, job: cpuJob(), now: monday.Add(10 * time.Hour), offer: func(o *Offer) {
			o.Capacity.Schedule, o.Capacity.TimeZone = berlinHours, "Europe/Berlin"
			o.Expires = monday.Add(11 * time.Hour)
		}},
		{name: "expired offer", base: cpuOffer, job: cpuJob(), now: monday.Add(4 * time.Minute),
			want: []string{"offer expired 3 min ago"}},
		{name: "expires exactly now", base: cpuOffer, job: cpuJob(), now: monday.Add(time.Minute),
			want: []string{"offer expired 0 s ago"}},
		{name: "every reason, in order", base: cpuOffer, job: func() Listing {
			l := gpuJob(8192, "")
			l.MemoryMiB = 65536
			return l
		}(), now: monday.Add(2 * time.Minute), offer: func(o *Offer) { o.Accept.RefuseOwners = []string{"idowner"} },
			want: []string{
				"offer expired 1 min ago",
				"you refused jobs of owner idowner",
				"needs a GPU with 8 GiB; this machine offers none",
				"needs a GPU program; you have not allowed GPU programs in this pool",
				"needs 64 GiB of memory per task; this machine offers 8 GiB",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.base()
			if tc.offer != nil {
				tc.offer(&o)
			}
			now := tc.now
			if now.IsZero() {
				now = monday
			}
			ok, why := Match(o, tc.job, now)
			if diff := cmp.Diff(tc.want, why); diff != "" {
				t.Errorf("Match reasons (-want +got):\n%s", diff)
			}
			if ok != (tc.want == nil) {
				t.Errorf("Match ok = %v with reasons %q", ok, why)
			}
		})
	}
}

func TestCompareCapability(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"8.0", "8.0", 0}, {"8.9", "8.0", 1}, {"7.5", "8.0", -1}, {"10.0", "9.0", 1}, {"", "3.0", -1}, {"x", "", 0},
	}
	for _, tc := range tests {
		if got := compareCapability(tc.a, tc.b); got != tc.want {
			t.Errorf("compareCapability(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
