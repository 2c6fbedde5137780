package offers

// Processor says what kind of processor one task of l needs, for people:
// "CPU", or "GPU" with its memory and compute capability when the job
// asks for them ("GPU 8 GiB cc 8.0+").
func (l Listing) Processor() string {
	r := l.Requirements
	if !r.GPU {
		return "CPU"
	}
	kind := "GPU"
	if r.GPUMemoryMiB > 0 {
		kind += " " + MiBText(r.GPUMemoryMiB)
	}
	if r.GPUComputeCapability != "" {
		kind += " cc " + r.GPUComputeCapability + "+"
	}
	return kind
}
