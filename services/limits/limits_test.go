package limits

import (
	"testing"

	"github.com/sg-project/sg/services/retryafter"
)

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		backlog int
		rate    float64
		want    int
	}{
		{0, 4, 1}, {1, 4, 1}, {8, 4, 3}, {10, 2, 6}, {-5, 2, 1}, {1 << 20, 1, 300},
		{5, 0, 4}, // nothing measured, no nominal: the backoff B(0)
	} {
		if got := RetryAfter(c.backlog, c.rate, retryafter.Params{}); got != c.want {
			t.Errorf("RetryAfter(%d, %g) = %d, want %d", c.backlog, c.rate, got, c.want)
		}
	}
}

func TestInt(t *testing.T) {
	env := map[string]string{"A": "12", "B": "0", "C": "x", "E": ""}
	look := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if n, err := Int(look, "A", 5); err != nil || n != 12 {
		t.Fatalf("A: %d %v", n, err)
	}
	if n, err := Int(look, "D", 5); err != nil || n != 5 {
		t.Fatalf("unset: %d %v", n, err)
	}
	if n, err := Int(look, "E", 5); err != nil || n != 5 {
		t.Fatalf("empty: %d %v", n, err)
	}
	for _, k := range []string{"B", "C"} {
		if _, err := Int(look, k, 5); err == nil {
			t.Fatalf("%s accepted", k)
		}
	}
}
