package engine

import "testing"

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		p, s string
		want bool
	}{
		{"", "", true}, {"", "a", false}, {"*", "", true}, {"*", "abc", true},
		{"a*", "abc", true}, {"a*", "bac", false}, {"*c", "abc", true}, {"*b*", "abc", true},
		{"?", "é", true}, {"??", "é", false}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"*a*b", "xaxxb", true}, {"*a*b", "xaxxbx", false}, {"a**b", "ab", true},
		{"[ab]", "a", false}, {"[ab]", "[ab]", true}, {`\*`, `\x`, true}, {"VOD.*", "VOD.L", true},
	}
	for _, c := range cases {
		if got := globMatch(c.p, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}
