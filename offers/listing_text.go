package offers

// Processor says what kind of processor one task of l needs, for people:
// "CPU", "GPU" with its memory and compute capability when the job asks
// for them ("GPU 8 GiB cc 8.0+"), or for a job that can use a GPU but
// runs anywhere (gpu = "optional") "CPU or GPU" likewise.
func (l Listing) Processor() string {
	r := l.Requirements
	if !r.GPU.Uses() {
		return "CPU"
	}
	kind := "GPU"
	if r.GPU.Optional() {
		kind = "CPU or GPU"
	}
	if r.GPUMemoryMiB > 0 {
		kind += " " + MiBText(r.GPUMemoryMiB)
	}
	if r.GPUComputeCapability != "" {
		kind += " cc " + r.GPUComputeCapability + "+"
	}
	return kind
}

// GPUText says for people what l asks of a GPU: "needs a GPU" (gpu =
// true), "uses a GPU if you allow one" (gpu = "optional"), or "" for a
// CPU job.
func (l Listing) GPUText() string {
	switch {
	case l.Requirements.GPU.Required():
		return "needs a GPU"
	case l.Requirements.GPU.Optional():
		return "uses a GPU if you allow one"
	}
	return ""
}
