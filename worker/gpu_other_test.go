//go:build (!cgo || !linux) && !windows

package worker

import (
	"errors"
	"testing"
)

func TestGPUListerWithoutNVML(t *testing.T) {
	l := NewGPULister()
	gpus, err := l.List(nil)
	if gpus != nil || err == nil || err.Error() != "no usable GPU: built without NVML" ||
		!errors.Is(err, ErrNoGPU) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("List = %v, %v", gpus, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
