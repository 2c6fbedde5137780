package idle

import (
	"math"
	"slices"
)

// GPUMemoryMiB is the device memory, in MiB, that a task given the GPUs
// uuids may allocate: the smallest of their memory shares,
// floor(MemoryTotalMiB × GPUSettings.MemoryShare), the same figure
// NewCapacity offers for each. A task computes in one context on the
// first of its GPUs, so the smallest share keeps it within every GPU's.
// ok is false when uuids is empty, the reading is unknown, a GPU is not in
// it or a share comes to less than 1 MiB: no cap can be given, and the
// task must not be given those GPUs.
func GPUMemoryMiB(s Settings, gpus Reading[[]GPU], uuids []string) (mib int64, ok bool) {
	if len(uuids) == 0 || !gpus.Known {
		return 0, false
	}
	mib = math.MaxInt64
	for _, u := range uuids {
		i := slices.IndexFunc(gpus.Value, func(g GPU) bool { return g.UUID == u })
		if i < 0 {
			return 0, false
		}
		share := int64(math.Floor(float64(gpus.Value[i].MemoryTotalMiB) * s.gpu(u).MemoryShare))
		mib = min(mib, share)
	}
	if mib < 1 {
		return 0, false
	}
	return mib, true
}
