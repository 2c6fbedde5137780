package agent

import "idlepool/idle"

// gpuMemory returns the GPUs a task is given and its device-memory cap in
// MiB (Config.GPUMemoryMiB): none when no cap can be given for them.
func (a *Agent) gpuMemory(uuids []string) ([]string, int64) {
	if len(uuids) == 0 || a.cfg.GPUMemoryMiB == nil {
		return uuids, 0
	}
	mib, ok := a.cfg.GPUMemoryMiB(uuids)
	if !ok {
		a.log.Warn("No device-memory cap for the allowed GPUs; the task runs without them", "gpus", len(uuids))
		return nil, 0
	}
	return uuids, mib
}

// gpuMemoryMiB is idle.GPUMemoryMiB with the owner's settings and the
// GPUs of the latest sample.
func (p *donorPolicy) gpuMemoryMiB(uuids []string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return idle.GPUMemoryMiB(p.settings, p.lastSig.GPUs, uuids)
}
