// Package poisontest runs a package's tests with the storage given back
// poisoned (messages.PoisonReleased): whatever reads a decoded column, a
// stream's window or a frame buffer after its release reads junk, so the
// answer a test checks is wrong, or its decode fails, instead of being right
// by luck until the storage is reused; storage given back twice panics.
package poisontest

import (
	"flag"
	"os"
	"testing"

	"github.com/sg-project/sg/messages"
)

// Main is a TestMain: m's tests run poisoned, except in a benchmark run,
// whose figures must not pay for a write of every byte given back.
func Main(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		messages.PoisonReleased(true)
	}
	os.Exit(m.Run())
}
