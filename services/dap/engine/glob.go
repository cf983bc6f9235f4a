package engine

import "unicode/utf8"

// globMatch reports whether s matches pattern, where * matches any run of characters and
// ? exactly one character (a rune, not a byte). Every other byte matches itself: like
// patterns have no classes or escapes, unlike path.Match. Linear in practice: it keeps one
// backtrack point, the latest *, which is enough because * matches anything.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starSx = px, sx
				px++
				continue
			case '?':
				if sx < len(s) {
					_, w := utf8.DecodeRuneInString(s[sx:])
					px++
					sx += w
					continue
				}
			default:
				if sx < len(s) && s[sx] == c {
					px++
					sx++
					continue
				}
			}
		}
		// Mismatch: let the latest * swallow one more character and retry after it.
		if starPx >= 0 && starSx < len(s) {
			_, w := utf8.DecodeRuneInString(s[starSx:])
			starSx += w
			px, sx = starPx+1, starSx
			continue
		}
		return false
	}
	return true
}
