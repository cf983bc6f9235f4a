package merge

import (
	"github.com/sg-project/sg/messages"
)

// newAggState returns an empty state for spec over an input column of type typ.
func newAggState(spec messages.AggSpec, typ messages.ColumnType) (AggState, error) {
	if err := checkAggType(spec.Func, typ); err != nil {
		return AggState{}, err
	}
	s := AggState{Name: spec.Name, Func: spec.Func, Type: typ}
	if _, _, _, value, _ := s.uses(); value {
		s.Value = messages.NewTable([]messages.ColumnSpec{{Name: spec.Name, Type: typ}})
	}
	return s, nil
}

// appendRow starts a new group with row i of in (time t).
func (s *AggState) appendRow(in *messages.Column, i int, t int64) {
	count, intSum, floatSum, value, tm := s.uses()
	if count {
		s.Count = append(s.Count, 1)
	}
	if intSum {
		s.IntSum = append(s.IntSum, in.Ints[i])
	}
	if floatSum {
		s.Special = append(s.Special, 0)
		s.FloatSum = append(s.FloatSum, fsumAdd(nil, &s.Special[len(s.Special)-1], in.Floats[i]))
	}
	if value {
		s.Value.Columns[0].AppendFrom(in, i)
	}
	if tm {
		s.Time = append(s.Time, t)
	}
}

// addRow folds row i of in (time t) into group g.
func (s *AggState) addRow(g int, in *messages.Column, i int, t int64) {
	switch s.Func {
	case messages.AggCount:
		s.Count[g]++
	case messages.AggSum, messages.AggAvg:
		if s.Func == messages.AggAvg {
			s.Count[g]++
		}
		if s.Type == messages.TypeInt {
			s.IntSum[g] += in.Ints[i]
		} else {
			s.FloatSum[g] = fsumAdd(s.FloatSum[g], &s.Special[g], in.Floats[i])
		}
	default:
		s.pick(g, in, i, t)
	}
}

// pick replaces group g's value by row i of in when min/max/first/last prefers it.
func (s *AggState) pick(g int, in *messages.Column, i int, t int64) {
	cur := &s.Value.Columns[0]
	c := in.Compare(i, cur, g)
	var better bool
	switch s.Func {
	case messages.AggMin:
		better = c < 0
	case messages.AggMax:
		better = c > 0
	case messages.AggFirst: // earliest; equal times: smaller value
		better = t < s.Time[g] || (t == s.Time[g] && c < 0)
	case messages.AggLast: // latest; equal times: larger value
		better = t > s.Time[g] || (t == s.Time[g] && c > 0)
	}
	if better {
		cur.SetFrom(g, in, i)
		if s.Time != nil {
			s.Time[g] = t
		}
	}
}

// appendGroup starts a new group with a copy of group h of src.
func (s *AggState) appendGroup(src *AggState, h int) {
	count, intSum, floatSum, value, tm := s.uses()
	if count {
		s.Count = append(s.Count, src.Count[h])
	}
	if intSum {
		s.IntSum = append(s.IntSum, src.IntSum[h])
	}
	if floatSum {
		s.FloatSum = append(s.FloatSum, append([]float64(nil), src.FloatSum[h]...))
		s.Special = append(s.Special, src.Special[h])
	}
	if value {
		s.Value.Columns[0].AppendFrom(&src.Value.Columns[0], h)
	}
	if tm {
		s.Time = append(s.Time, src.Time[h])
	}
}

// combine folds group h of src into group g.
func (s *AggState) combine(g int, src *AggState, h int) {
	count, intSum, floatSum, value, _ := s.uses()
	if count {
		s.Count[g] += src.Count[h]
	}
	if intSum {
		s.IntSum[g] += src.IntSum[h]
	}
	if floatSum {
		for _, x := range src.FloatSum[h] {
			s.FloatSum[g] = fsumAdd(s.FloatSum[g], &s.Special[g], x)
		}
		s.Special[g] += src.Special[h]
	}
	if value {
		var t int64
		if src.Time != nil {
			t = src.Time[h]
		}
		s.pick(g, &src.Value.Columns[0], h, t)
	}
}

// output is the final column of the state, one row per group.
func (s *AggState) output() messages.Column {
	out := messages.Column{Name: s.Name}
	switch s.Func {
	case messages.AggCount:
		out.Type, out.Ints = messages.TypeInt, append([]int64(nil), s.Count...)
	case messages.AggSum:
		if s.Type == messages.TypeInt {
			out.Type, out.Ints = messages.TypeInt, append([]int64(nil), s.IntSum...)
		} else {
			out.Type, out.Floats = messages.TypeFloat, make([]float64, len(s.FloatSum))
			for g := range s.FloatSum {
				out.Floats[g] = fsumResult(s.FloatSum[g], s.Special[g])
			}
		}
	case messages.AggAvg:
		out.Type, out.Floats = messages.TypeFloat, make([]float64, len(s.Count))
		for g, n := range s.Count {
			if s.Type == messages.TypeInt {
				out.Floats[g] = float64(s.IntSum[g]) / float64(n)
			} else {
				out.Floats[g] = fsumResult(s.FloatSum[g], s.Special[g]) / float64(n)
			}
		}
	default:
		out = s.Value.Columns[0]
		out.Name = s.Name
	}
	return out
}
