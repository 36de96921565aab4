package grpcapi

import (
	"testing"

	"github.com/fw-serve/fw/internal/testleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	testleak.Main(m)
}
