package idle

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// busyEnv makes the test binary, re-executed as a child, spin on one CPU
// for at most busyFor instead of running tests (see startBusyChild).
const (
	busyEnv = "IDLE_TEST_BUSY_CHILD"
	busyFor = 20 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(busyEnv) == "1" {
		end := time.Now().Add(busyFor)
		x := 0
		for time.Now().Before(end) {
			for i := 0; i < 1_000_000; i++ {
				x += i
			}
		}
		if x == 42 {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
