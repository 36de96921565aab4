package modelhost

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// batcher worker, a background drain or a reload left running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
