package job

import (
	"encoding/json"
	"fmt"
)

// GPUNeed is [requirements] gpu: whether a job's tasks need a GPU
// (gpu = true: only machines that offer one are leased its tasks), can
// use one (gpu = "optional": every machine is, and a task gets the GPUs
// its donor allows, computing on the CPU where there are none), or do
// not use one (gpu = false or absent, the zero value). In JSON it is
// true, "optional" or false.
type GPUNeed struct{ level uint8 }

// The values of GPUNeed.
var (
	GPUNone     = GPUNeed{}
	GPURequired = GPUNeed{1}
	GPUOptional = GPUNeed{2}
)

// Required reports gpu = true: only GPU machines may take the job's tasks.
func (g GPUNeed) Required() bool { return g == GPURequired }

// Optional reports gpu = "optional".
func (g GPUNeed) Optional() bool { return g == GPUOptional }

// Uses reports whether the job's tasks use a GPU when given one (gpu =
// true or "optional"): only such tasks are given GPUs.
func (g GPUNeed) Uses() bool { return g != GPUNone }

// String is how the manifest writes g: "true", "optional" or "false".
func (g GPUNeed) String() string {
	switch g {
	case GPURequired:
		return "true"
	case GPUOptional:
		return "optional"
	}
	return "false"
}

// UnmarshalText reads the manifest's value: the TOML booleans true and
// false, or the string "optional".
func (g *GPUNeed) UnmarshalText(b []byte) error {
	switch string(b) {
	case "true":
		*g = GPURequired
	case "false":
		*g = GPUNone
	case "optional":
		*g = GPUOptional
	default:
		return fmt.Errorf("want true (only machines with a GPU), \"optional\" (every machine; a GPU where the donor allows one) or false, got %q", b)
	}
	return nil
}

// MarshalJSON writes true, "optional" or false.
func (g GPUNeed) MarshalJSON() ([]byte, error) {
	if g.Optional() {
		return []byte(`"optional"`), nil
	}
	return json.Marshal(g.Required())
}

// UnmarshalJSON reads true, "optional" or false (null is false).
func (g *GPUNeed) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	switch x := v.(type) {
	case nil:
		*g = GPUNone
	case bool:
		*g = GPUNone
		if x {
			*g = GPURequired
		}
	case string:
		if x != "optional" {
			return fmt.Errorf("gpu: want true, false or \"optional\", got %q", x)
		}
		*g = GPUOptional
	default:
		return fmt.Errorf("gpu: want true, false or \"optional\", got %s", b)
	}
	return nil
}

// Equal reports whether g and o are the same (for go-cmp, which compares
// through it instead of the unexported field).
func (g GPUNeed) Equal(o GPUNeed) bool { return g == o }
