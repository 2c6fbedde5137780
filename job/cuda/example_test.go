package cuda_test

import (
	"errors"
	"fmt"

	"idlepool/job/cuda"
)

// A job program asks for a device and falls back to the CPU without one,
// as every native build (this example included) and every task the worker
// gives no GPU does.
func Example() {
	if cuda.Devices() == 0 {
		fmt.Println("no GPU: computing on the CPU")
	}
	_, err := cuda.Alloc(1 << 20)
	fmt.Println(errors.Is(err, cuda.ErrNoDevice))
	// Output:
	// no GPU: computing on the CPU
	// true
}
