package defaults

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads the value s of the duration setting name as README
// says they are written: an SG_ duration is a Go duration ("60s", "1m30s")
// or plain milliseconds, a seed's KXI_ one milliseconds only. A duration is
// positive; with zero, 0 is a value too. Errors name the setting. It is the
// one parser of duration settings: cmd/sg's and the services' (the RC's
// label set retention, the Retry-After settings) read the same inputs the
// same way.
func ParseDuration(name, s string, zero bool) (time.Duration, error) {
	least, want := "a positive number of milliseconds", "a positive duration"
	if zero {
		least, want = "0 or more milliseconds", "0 or a duration"
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 || ms == 0 && !zero {
			return 0, fmt.Errorf("%s=%q: must be %s", name, s, least)
		}
		if ms > int64(math.MaxInt64/time.Millisecond) {
			return 0, fmt.Errorf("%s=%q: more milliseconds than a duration holds", name, s)
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	if strings.HasPrefix(name, "KXI_") {
		return 0, fmt.Errorf("%s=%q: want milliseconds, e.g. 60000", name, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d == 0 && !zero {
		return 0, fmt.Errorf("%s=%q: want %s such as 60s or milliseconds such as 60000", name, s, want)
	}
	return d, nil
}
