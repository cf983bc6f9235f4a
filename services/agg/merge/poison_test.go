package merge

import (
	"testing"

	"github.com/sg-project/sg/test/poisontest"
)

// The package's tests run with the storage given back poisoned: a read after
// release shows as a wrong answer (poisontest).
func TestMain(m *testing.M) { poisontest.Main(m) }
