package modelhost

import (
	"testing"

	"github.com/fw-serve/fw/internal/testleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// batcher worker, a background drain or a reload left running.
func TestMain(m *testing.M) {
	testleak.Main(m)
}
