package core

import (
	"testing"
	"time"
)

// An SQL request whose DAP leaves the fleet while running its portion, with
// no other DAP for the label set, times out with the seed's sql-only reason
// "Required DAPs dropped", naming the DAP; a getData in the same position
// says "No DAP covers labels/time range" with no DAP.
func TestTimeoutRequiredDAPsDropped(t *testing.T) {
	for _, tc := range []struct {
		api  string
		sql  bool
		want string
	}{
		{"sql", true, `reason=\"Required DAPs dropped\";dap=[a:5080]`},
		{"getData", false, `reason=\"No DAP covers labels/time range\";dap=[]`},
	} {
		t.Run(tc.api, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.register("a", lbl("region", "eu"))
			h.register("u", lbl("region", "us"))
			out := h.step(RequestArrived{At: h.now, Request: Request{ID: "s1", API: tc.api, Table: "trade", Labels: Selector{"region": {"eu"}},
				Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Second), Agg: "agg-1", SQL: tc.sql}})
			dispatchedTo(t, out, "a")
			h.advance(100 * time.Millisecond)
			none[Reply](t, h.step(DAPLost{At: h.now, DAP: "a"}))
			wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;`+tc.want+`]"]`)
		})
	}
}
