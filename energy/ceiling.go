package energy

import "time"

// DutyShare returns the share of time (minShare..1) the workers may run
// so that a GPU's board power stays under ceilingW, given the share in
// force and what the board drew under it (drawW, NVML's power reading)
// and at rest (idleW). It models the draw as idleW plus the share times
// what a task adds at full speed, so one step lands near the ceiling
// and a draw under it lets the share grow back. A ceiling at or below
// the idle draw gives minShare; no draw above idle (nothing measured
// yet) keeps share.
func DutyShare(share, ceilingW, drawW, idleW, minShare float64) float64 {
	share = min(max(share, minShare), 1)
	switch {
	case ceilingW <= 0:
		return 1
	case ceilingW <= idleW:
		return minShare
	case drawW <= idleW:
		return share
	}
	next := share * (ceilingW - idleW) / (drawW - idleW)
	return min(max(next, minShare), 1)
}

// GPUPower returns the board power of each GPU a running task uses, in
// watts, and the idle draw the meter knows for it (0 when none), from the
// last reading, with that reading's time: what a GPU power ceiling
// compares with. GPUs whose power was not read are missing. A control
// loop that steps on these draws steps once per reading (GPUDraw.At):
// a reading taken before its last step says nothing of that step.
func (m *Meter) GPUPower() map[string]GPUDraw {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]GPUDraw{}
	if m.last == nil || m.active == 0 {
		return out
	}
	for uuid, r := range m.last.gpus {
		if r.HasPower {
			out[uuid] = GPUDraw{PowerW: r.PowerW, IdleW: m.gpuIdleW[uuid], At: m.last.at}
		}
	}
	return out
}

// Now is the meter's clock (Config.Now): the time a reading taken now
// would carry in GPUDraw.At.
func (m *Meter) Now() time.Time { return m.cfg.Now() }

// GPUDraw is a GPU's board power at the meter's last reading and at
// rest, in watts, and when that reading was taken (the meter's clock,
// Config.Now).
type GPUDraw struct {
	PowerW float64
	IdleW  float64
	At     time.Time
}
