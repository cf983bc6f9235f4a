package test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
)

// argsTap keeps every portion dispatch and Agg expectation on the bus.
type argsTap struct {
	dispatches   chan messages.PortionDispatch
	expectations chan messages.AggExpectation
}

func tapArgs(t *testing.T, sys *system) *argsTap {
	t.Helper()
	tap := &argsTap{dispatches: make(chan messages.PortionDispatch, 256), expectations: make(chan messages.AggExpectation, 256)}
	for _, p := range []string{sys.s.DAPPortion("*"), sys.s.AggExpect("*")} {
		sub, err := sys.nc.Subscribe(p, func(m *nats.Msg) {
			if strings.HasSuffix(m.Subject, ".portion") {
				d, err := messages.DecodeValid[messages.PortionDispatch](m.Data)
				if err != nil {
					t.Errorf("tap: dispatch: %v", err)
					return
				}
				tap.dispatches <- d
				return
			}
			e, err := messages.DecodeValid[messages.AggExpectation](m.Data)
			if err != nil {
				t.Errorf("tap: expectation: %v", err)
				return
			}
			tap.expectations <- e
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := sys.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tap
}

// check takes what the tap saw of one request (requests run one at a time):
// every dispatch and expectation of it, each carrying want (both fields,
// byte for byte) at the version that carries it. The request is whole on the
// tap once its expectation is sealed and every portion expected (less the
// superseded) has had its dispatch; the tap's messages may come after the
// answer, so check waits for that, with a bound.
func (tap *argsTap) check(t *testing.T, what string, want messages.Args) {
	t.Helper()
	wantV := uint8(1)
	if len(want.JSON) > 0 {
		wantV = messages.ArgsJSONVersion
	}
	same := func(got messages.Args) bool {
		return bytes.Equal(got.Msgpack, want.Msgpack) && bytes.Equal(got.JSON, want.JSON)
	}
	bound := time.After(10 * time.Second)
	expected, dispatched := map[messages.PortionRef]bool{}, map[messages.PortionRef]bool{}
	sealed := false
	whole := func() bool {
		if !sealed || len(expected) == 0 {
			return false
		}
		for ref := range expected {
			if !dispatched[ref] {
				return false
			}
		}
		return true
	}
	for !whole() {
		select {
		case d := <-tap.dispatches:
			dispatched[d.Ref()] = true
			if got := d.Arguments(); !same(got) || d.V != wantV {
				t.Errorf("%s: the DAP got v%d args %x argsj %q, want v%d args %x argsj %q", what, d.V, []byte(got.Msgpack), got.JSON, wantV, []byte(want.Msgpack), want.JSON)
			}
		case e := <-tap.expectations:
			for _, ref := range e.Expect {
				expected[ref] = true
			}
			for _, ref := range e.Supersede {
				delete(expected, ref)
			}
			sealed = e.Sealed
			if got := e.Arguments(); !same(got) || e.V != wantV {
				t.Errorf("%s: the Agg got v%d args %x argsj %q, want v%d args %x argsj %q", what, e.V, []byte(got.Msgpack), got.JSON, wantV, []byte(want.Msgpack), want.JSON)
			}
		case <-bound:
			t.Fatalf("%s: within 10s the tap saw %d portions dispatched, %d expected, sealed %v", what, len(dispatched), len(expected), sealed)
		}
	}
}

// TestArgsArriveAsSent (issue 10, "never re-encoded by the GW"): the bytes
// a JSON caller sent arrive byte-identical at the DAPs (PortionDispatch) and
// the Agg (AggExpectation), a msgpack caller's likewise in Args, and the
// answers are what they were: a JSON getData with an aggregate equals the
// msgpack one, a JSON sql and a JSON ping are answered.
func TestArgsArriveAsSent(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	fleet := sys.startDemo(demoFleetConfig(sys, 300))
	tap := tapArgs(t, sys)
	lay := fleet.Layout
	start, end := lay.IDBStart.Add(-3*time.Hour).UTC(), lay.End.Add(-10*time.Minute).UTC()

	// JSON getData with an aggregate, spaced and ordered as no encoder writes it.
	jsonArgs := `{ "groupBy": ["sym"],  "table":"trade", "labels": {"region": ["eu","us"]},
	  "startTS": "` + start.Format(time.RFC3339Nano) + `", "endTS": "` + end.Format(time.RFC3339Nano) + `",
	  "agg": [["n","count"], ["volume","sum","size"]], "sortCols": ["sym"] }`
	raw := jsonAsSent(t, sys, subjects.APIGetData, jsonArgs)
	var env struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload []struct {
			Sym    string  `json:"sym"`
			N      int64   `json:"n"`
			Volume float64 `json:"volume"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || !env.Header.Status.IsOK() || len(env.Payload) == 0 {
		t.Fatalf("JSON getData: %.300s (%v)", raw, err)
	}
	tap.check(t, "JSON getData", messages.JSONArgs([]byte(jsonArgs)))

	// The same through a msgpack caller: the same groups and figures.
	margs := messages.GetDataArgs{Table: demo.Trade, StartTS: start, EndTS: end, GroupBy: []string{"sym"}, SortCols: []string{"sym"},
		Labels: messages.LabelSelector{demo.LabelKey: {"eu", "us"}},
		Agg:    []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "volume", Func: messages.AggSum, Column: "size"}}}
	resp, tbl := sys.getData(margs, messages.Opts{})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("msgpack getData: %v", resp.Header.Status)
	}
	sameTable(t, tbl, expected(t, fleet, margs))
	if tbl.NumRows() != len(env.Payload) {
		t.Fatalf("JSON getData: %d groups, msgpack %d", len(env.Payload), tbl.NumRows())
	}
	var total int64
	for _, r := range env.Payload {
		total += r.N
	}
	nCol := tbl.Col("n")
	if nCol == nil {
		t.Fatal("msgpack getData: no column n")
	}
	var mtotal int64
	for i := range tbl.NumRows() {
		switch v := nCol.Value(i).(type) {
		case int64:
			mtotal += v
		case float64:
			mtotal += int64(v)
		default:
			t.Fatalf("count of type %T", v)
		}
	}
	if total != mtotal || total == 0 {
		t.Fatalf("JSON getData counts %d trades, msgpack %d", total, mtotal)
	}
	mb, err := messages.Encode(&margs)
	if err != nil {
		t.Fatal(err)
	}
	// The client sends these bytes as the payload: what the DAPs and the Agg get.
	tap.check(t, "msgpack getData", messages.MsgpackArgs(mb))

	// JSON sql: the RC plans it into new getData arguments, msgpack (argsj cleared).
	raw = jsonAsSent(t, sys, subjects.APISQL, `{"query": "SELECT count(*) AS n FROM trade WHERE region = 'eu'"}`)
	var sqlEnv struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload []map[string]any        `json:"payload"`
	}
	if err := json.Unmarshal(raw, &sqlEnv); err != nil || !sqlEnv.Header.Status.IsOK() || len(sqlEnv.Payload) != 1 {
		t.Fatalf("JSON sql: %.300s (%v)", raw, err)
	}
	select {
	case d := <-tap.dispatches:
		if len(d.ArgsJSON) != 0 || d.V != messages.PortionVersion {
			t.Errorf("sql: the DAP got v%d with argsj %q, want the RC's plan in msgpack at v1", d.V, d.ArgsJSON)
		}
		if a, err := d.Arguments().GetData(); err != nil || a.Table != demo.Trade {
			t.Errorf("sql: the DAP's planned arguments %+v (%v)", a, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sql: no dispatch seen")
	}

	// JSON ping: the RC answers from its view of the fleet.
	raw = jsonAsSent(t, sys, subjects.APIPing, `{"labels": {"region": "eu"}}`)
	var pingEnv struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload []map[string]any        `json:"payload"`
	}
	if err := json.Unmarshal(raw, &pingEnv); err != nil || !pingEnv.Header.Status.IsOK() || len(pingEnv.Payload) == 0 {
		t.Fatalf("JSON ping: %.300s (%v)", raw, err)
	}
	for _, p := range pingEnv.Payload {
		if !strings.Contains(strings.ToLower(mustJSONString(t, p)), `"eu"`) {
			t.Errorf("JSON ping answered for a DAP outside region eu: %v", p)
		}
	}
}

// jsonAsSent sends a JSON request whose payload is args byte for byte (the
// sg client's JSON envelope compacts it) with a plain NATS request, and
// returns the answer's body.
func jsonAsSent(t *testing.T, sys *system, api, args string) []byte {
	t.Helper()
	body := `{"header": {"v": 1, "api": "` + api + `"}, "payload": ` + args + `}`
	m, err := sys.nc.Request(sys.s.GWAPI(api), []byte(body), 30*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", api, err)
	}
	return m.Data
}

func mustJSONString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
