package messages

import (
	"testing"
	"time"
)

// deepWhere is a getData whose Where nests depth deep the costliest way: a
// chain of NOTs down to a filter with a list value.
func deepWhere(depth int) GetDataArgs {
	c := Cond{Op: CondFilter, Filter: &Filter{Op: FilterIn, Column: "sym", Value: []any{"a", "b"}}}
	for range depth - 1 {
		c = Cond{Op: CondNot, Args: []Cond{c}}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return GetDataArgs{Table: "trade", StartTS: t0, EndTS: t0.Add(time.Hour), Where: &Where{V: WhereVersion, Root: c}}
}

// roundTrip encodes m and decodes it as the services do.
func roundTrip[T any, P interface {
	*T
	Validate() error
}](m P) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	_, err = DecodeValid[T, P](b)
	return err
}

// Every Where that Validate accepts reaches every service that reads it: the
// DAPs (PortionDispatch, and a secondary RC's PeerPortion around it), the Agg
// (AggExpectation), the RC (RCSubmission) and an adopting GW (LogEntry
// around it) decode it within MaxDepth, nested as it travels. Before, a
// Where that planned and validated fine could be refused by every DAP and
// the Agg, and its request was never answered.
func TestWhereAtItsLimitReachesEveryService(t *testing.T) {
	for d := 1; d <= MaxWhereDepth+2; d++ {
		a := deepWhere(d)
		if err := a.Validate(); d > MaxWhereDepth {
			if err == nil {
				t.Fatalf("a Where %d deep validates: the limit is %d", d, MaxWhereDepth)
			}
			continue
		} else if err != nil {
			t.Fatalf("a Where %d deep: %v", d, err)
		}
		args, err := Encode(&a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeGetDataArgsMsgpack(args); err != nil {
			t.Fatalf("depth %d, the arguments alone: %v", d, err)
		}
		for _, s := range envSamples() {
			var err error
			switch m := s.(type) {
			case *PortionDispatch:
				m.Args = args
				err = roundTrip(m)
			case *PeerPortion:
				m.Dispatch.Args = args
				err = roundTrip(m)
			case *AggExpectation:
				m.Args = args
				err = roundTrip(m)
			case *RCSubmission:
				m.Args = args
				err = roundTrip(m)
			case *LogEntry:
				m.Submission.Args = args
				err = roundTrip(m)
			default:
				continue
			}
			if err != nil {
				t.Fatalf("depth %d in a %T: %v", d, s, err)
			}
		}
	}
}
