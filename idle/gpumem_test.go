package idle

import "testing"

func TestGPUMemoryMiB(t *testing.T) {
	gpus := Reading[[]GPU]{Known: true, Value: []GPU{
		{Index: 0, UUID: "GPU-aaa", MemoryTotalMiB: 24000},
		{Index: 1, UUID: "GPU-bbb", MemoryTotalMiB: 12000},
	}}
	s := Defaults()
	s.GPUs = map[string]GPUSettings{"GPU-aaa": {Use: true, MemoryShare: 0.25}, "GPU-bbb": {Use: true, MemoryShare: 0.75}}
	tests := []struct {
		name  string
		gpus  Reading[[]GPU]
		uuids []string
		mib   int64
		ok    bool
	}{
		{"one GPU, its share", gpus, []string{"GPU-bbb"}, 9000, true},
		{"two GPUs, the smaller share", gpus, []string{"GPU-aaa", "GPU-bbb"}, 6000, true},
		{"no GPU", gpus, nil, 0, false},
		{"GPU not found", gpus, []string{"GPU-ccc"}, 0, false},
		{"reading unknown", Reading[[]GPU]{Err: "no NVIDIA driver"}, []string{"GPU-aaa"}, 0, false},
		{"share under 1 MiB", Reading[[]GPU]{Known: true, Value: []GPU{{UUID: "GPU-aaa", MemoryTotalMiB: 3}}}, []string{"GPU-aaa"}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mib, ok := GPUMemoryMiB(s, tc.gpus, tc.uuids)
			if mib != tc.mib || ok != tc.ok {
				t.Errorf("GPUMemoryMiB = %d, %v; want %d, %v", mib, ok, tc.mib, tc.ok)
			}
		})
	}
	// The default share applies to a GPU without one.
	if mib, ok := GPUMemoryMiB(Defaults(), gpus, []string{"GPU-bbb"}); !ok || mib != int64(12000*DefaultGPUMemoryShare) {
		t.Errorf("default share: %d, %v; want %d", mib, ok, int64(12000*DefaultGPUMemoryShare))
	}
}
