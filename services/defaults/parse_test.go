package defaults

import (
	"strings"
	"testing"
	"time"
)

// TestParseDuration: the inputs every duration setting takes, and errors
// that name the setting.
func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		zero    bool
		want    time.Duration
		bad     bool
	}{
		{"SG_X", "90s", false, 90 * time.Second, false},
		{"SG_X", "1m30s", false, 90 * time.Second, false},
		{"SG_X", "600000", false, 10 * time.Minute, false},
		{"SG_X", "0", false, 0, true},
		{"SG_X", "0s", false, 0, true},
		{"SG_X", "0", true, 0, false},
		{"SG_X", "0ms", true, 0, false},
		{"SG_X", "-5", true, 0, true},
		{"SG_X", "-5m", true, 0, true},
		{"SG_X", "ten minutes", true, 0, true},
		{"SG_X", "99999999999999999", true, 0, true}, // overflows a Duration in milliseconds
		{"KXI_X", "5000", false, 5 * time.Second, false},
		{"KXI_X", "5s", false, 0, true}, // the seed's names take milliseconds only
	} {
		d, err := ParseDuration(tc.name, tc.s, tc.zero)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), tc.name+"=") {
				t.Errorf("%s=%q zero=%v: %v %v, want an error naming it", tc.name, tc.s, tc.zero, d, err)
			}
			continue
		}
		if err != nil || d != tc.want {
			t.Errorf("%s=%q zero=%v: %v %v, want %v", tc.name, tc.s, tc.zero, d, err, tc.want)
		}
	}
}
