package merge

import (
	"os"
	"testing"

	"github.com/sg-project/sg/messages"
)

// Every test of the package runs with the storage given back poisoned
// (messages.PoisonReleased): whatever reads a column, window or frame buffer
// after its release reads junk, and the answer the test checks is wrong, or
// its decode fails, instead of being right by luck until the storage is
// reused.
func TestMain(m *testing.M) {
	messages.PoisonReleased(true)
	os.Exit(m.Run())
}
