package merge

import (
	"flag"
	"os"
	"testing"

	"github.com/sg-project/sg/messages"
)

// Every test of the package runs with the storage given back poisoned
// (messages.PoisonReleased): whatever reads a column, window or frame buffer
// after its release reads junk, and the answer the test checks is wrong, or
// its decode fails, instead of being right by luck until the storage is
// reused. Not in a benchmark run: the poisoning costs a write of every byte
// given back, which the figures must not pay.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		messages.PoisonReleased(true)
	}
	os.Exit(m.Run())
}
