package merge

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exactSum is the reference: big.Float with enough precision to hold any float64 sum of
// these inputs exactly, rounded once to float64 (nearest even).
func exactSum(xs []float64) float64 {
	s := new(big.Float).SetPrec(4096)
	for _, x := range xs {
		s.Add(s, new(big.Float).SetPrec(4096).SetFloat64(x))
	}
	f, _ := s.Float64()
	return f
}

func TestFsumIsCorrectlyRoundedAndOrderFree(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		xs := make([]float64, 1+rng.IntN(200))
		for i := range xs {
			xs[i] = rng.NormFloat64() * math.Pow(2, float64(rng.IntN(200)-100))
		}
		want := exactSum(xs)
		var p []float64
		var sp float64
		for _, x := range xs {
			p = fsumAdd(p, &sp, x)
		}
		if got := fsumResult(p, sp); got != want {
			t.Fatalf("seed %d: fsum %v, exact %v", seed, got, want)
		}
		// Split in two, sum each, merge the partials: the same float.
		k := rng.IntN(len(xs))
		var a, b []float64
		var sa, sb float64
		for _, x := range xs[:k] {
			a = fsumAdd(a, &sa, x)
		}
		for _, x := range xs[k:] {
			b = fsumAdd(b, &sb, x)
		}
		for _, x := range a {
			b = fsumAdd(b, &sb, x)
		}
		if got := fsumResult(b, sa+sb); got != want {
			t.Fatalf("seed %d: merged %v, exact %v", seed, got, want)
		}
	}
	// The classic case a naive sum gets wrong.
	var p []float64
	var sp float64
	for _, x := range []float64{1e100, 1, -1e100, 1e-100} {
		p = fsumAdd(p, &sp, x)
	}
	if got := fsumResult(p, sp); got != 1 {
		t.Errorf("1e100+1-1e100+1e-100 = %v, want 1", got)
	}
	p, sp = nil, 0
	for _, x := range []float64{1, math.Inf(1), math.Inf(-1)} {
		p = fsumAdd(p, &sp, x)
	}
	if got := fsumResult(p, sp); !math.IsNaN(got) {
		t.Errorf("1+Inf-Inf = %v, want NaN", got)
	}
}
