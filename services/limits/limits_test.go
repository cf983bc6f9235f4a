package limits

import "testing"

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct{ backlog, slots, want int }{
		{0, 4, MinRetryAfter}, {1, 4, 1}, {8, 4, 2}, {9, 4, 3}, {10, 0, 10}, {-5, 2, MinRetryAfter}, {1 << 20, 1, MaxRetryAfter},
	} {
		if got := RetryAfter(c.backlog, c.slots); got != c.want {
			t.Errorf("RetryAfter(%d, %d) = %d, want %d", c.backlog, c.slots, got, c.want)
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
