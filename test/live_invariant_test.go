package test

import (
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// coverageWatch replays the DAP events an RC sees (registrations and status updates, in
// the order published) into each label set's coverage and checks, after every event,
// the roll invariant of package live: every time is in the purview of at least one DAP of
// the label set, and in the purview of at most one available DAP.
type coverageWatch struct {
	mu         sync.Mutex
	daps       map[string]dapView
	events     int
	violations []string
}

type dapView struct {
	labels    string
	available bool
	purview   messages.TimeRange
}

func watchCoverage(t *testing.T, ls *liveSys) *coverageWatch {
	w := &coverageWatch{daps: map[string]dapView{}}
	sub, err := ls.nc.Subscribe(ls.s.DAPEventsPattern(), func(m *nats.Msg) {
		id, event, ok := ls.s.ParseDAPEvent(m.Subject)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		switch event {
		case subjects.EventRegister:
			r, err := messages.DecodeValid[messages.DAPRegistration](m.Data)
			if err != nil {
				return
			}
			w.daps[id] = dapView{labels: r.Labels.Key(), available: r.Available, purview: r.Purview}
		case subjects.EventStatus:
			u, err := messages.DecodeValid[messages.DAPStatusUpdate](m.Data)
			if err != nil {
				return
			}
			v := w.daps[id]
			v.available, v.purview = u.Available, u.Purview
			w.daps[id] = v
		case subjects.EventLost:
			delete(w.daps, id)
		default:
			return
		}
		w.events++
		w.check(id + " " + event)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

// check tests every elementary range between purview ends of every label set.
func (w *coverageWatch) check(after string) {
	bySet := map[string][]dapView{}
	for _, v := range w.daps {
		bySet[v.labels] = append(bySet[v.labels], v)
	}
	for set, vs := range bySet {
		if len(vs) < 3 { // a group still registering
			continue
		}
		var cuts []int64
		for _, v := range vs {
			cuts = append(cuts, v.purview.Start, v.purview.End)
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		for i := 0; i+1 < len(cuts); i++ {
			at := cuts[i] // stands for [cuts[i], cuts[i+1])
			in, avail := 0, 0
			for _, v := range vs {
				if v.purview.Contains(at) {
					in++
					if v.available {
						avail++
					}
				}
			}
			if in == 0 || avail > 1 {
				if len(w.violations) < 20 {
					w.violations = append(w.violations, set+" after "+after+": "+messages.TimeRange{Start: cuts[i], End: cuts[i+1]}.String()+
						" in "+itoa(in)+" purviews, "+itoa(avail)+" available")
				}
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func (w *coverageWatch) verify(t *testing.T) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error("roll invariant broken: " + v)
	}
	return w.events
}
