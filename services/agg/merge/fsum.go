package merge

import "math"

// Exact float summation (Shewchuk 1997, "Adaptive precision floating-point arithmetic",
// as in Python's math.fsum). A sum is carried as non-overlapping partials in increasing
// magnitude whose exact total is the sum, so adding values in any order, or merging the
// partials of two sums, represents the same real number; fsumResult rounds it once,
// correctly, so the float answer does not depend on how the data was split.
//
// Non-finite values are kept apart in a float64 (special): +Inf, -Inf and NaN combine
// associatively under ordinary addition. Finite sums beyond ±MaxFloat64 overflow into special
// as an infinity, like an ordinary float sum would.

// fsumAdd adds x to the partials p and returns the new partials.
func fsumAdd(p []float64, special *float64, x float64) []float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		*special += x
		return p
	}
	i := 0
	for _, y := range p {
		if math.Abs(x) < math.Abs(y) {
			x, y = y, x
		}
		hi := x + y
		if math.IsInf(hi, 0) {
			*special += hi
			return p[:i]
		}
		lo := y - (hi - x)
		if lo != 0 {
			p[i] = lo
			i++
		}
		x = hi
	}
	return append(p[:i], x)
}

// fsumResult is the correctly rounded value of the partials plus special.
func fsumResult(p []float64, special float64) float64 {
	if special != 0 || math.IsNaN(special) {
		return special
	}
	n := len(p)
	if n == 0 {
		return 0
	}
	n--
	hi := p[n]
	var lo float64
	for n > 0 {
		x := hi
		n--
		y := p[n]
		hi = x + y
		lo = y - (hi - x)
		if lo != 0 {
			break
		}
	}
	// Round half to even across the remaining partials: if the rest has the sign of lo,
	// the exact sum is beyond the halfway point that hi+lo rounded at.
	if n > 0 && ((lo < 0 && p[n-1] < 0) || (lo > 0 && p[n-1] > 0)) {
		y := lo * 2
		x := hi + y
		if y == x-hi {
			hi = x
		}
	}
	return hi
}
