package store_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// scheduler, database and subprocess a test starts must be stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
