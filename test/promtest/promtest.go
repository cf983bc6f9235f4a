// Package promtest reads metrics back in tests: one home for summing a
// counter's series from a registry, and for one metric's value, which the
// services' tests each used to carry a copy of.
package promtest

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum is the sum of the series of metric name (counters and gauges) in g
// whose labels include every pair of labels (nil: every series).
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m.GetLabel(), labels) {
				continue
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// Value is the value of one counter or gauge (a series: a vector's with
// its labels given) now.
func Value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

func hasLabels(have []*dto.LabelPair, want map[string]string) bool {
	for k, v := range want {
		if !slices.ContainsFunc(have, func(lp *dto.LabelPair) bool { return lp.GetName() == k && lp.GetValue() == v }) {
			return false
		}
	}
	return true
}
