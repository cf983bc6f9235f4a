package test

import (
	"flag"
	"os"
	"testing"

	"github.com/sg-project/sg/messages"
)

// The tests of the system run in this process (startSystem) with the storage
// given back poisoned (messages.PoisonReleased): a read after release
// anywhere on an answer's path (a decoded window, a stream's window, a frame
// buffer) makes the answer differ from the whole one
// (TestGetDataStreamMatchesWhole) instead of being right by luck. Not in a
// benchmark run: the poisoning costs a write of every byte given back.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		messages.PoisonReleased(true)
	}
	os.Exit(m.Run())
}
