package gw

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// TestMsgpackScopeFromTheArgumentsWalk: the GW lifts a msgpack caller's
// scope from the API decoder's one walk of the arguments, for every API with
// arguments; it walks them again (scopeWalk, counted here) only for
// arguments it refuses, so that a bad scope is named first there too, as for
// JSON (TestJSONScopeFromTheArgumentsParse).
func TestMsgpackScopeFromTheArgumentsWalk(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	g := newTestGW(t, nc)
	walks := 0
	g.scopeWalk = func(c messages.Content, args []byte) (messages.Scope, bool, error) {
		walks++
		return messages.ScopeFromArgs(c, args)
	}
	check := func(api string, args map[string]any) (messages.RequestHeader, messages.Status) {
		t.Helper()
		payload, err := msgpack.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		body, err := messages.Request{Header: messages.RequestHeader{API: api}, Payload: payload, Content: messages.ContentMsgpack}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: g.s.GWAPI(api), Header: nats.Header{messages.HdrContentType: {"msgpack"}}, Data: body}
		req, st := g.check(g.newReqInfoNoLog(api, msg, time.Now()), msg)
		return req.header, st
	}
	eu := map[string]any{"assembly": "eu", "tier": "hdb"}
	for api, args := range map[string]map[string]any{
		subjects.APIGetData: {"v": 1, "t": "trade", "scope": eu},
		subjects.APIPing:    {"labels": map[string][]string{"region": {"eu"}}, "scope": eu},
		subjects.APISQL:     {"query": "SELECT * FROM trade", "scope": eu},
	} {
		walks = 0
		h, st := check(api, args)
		if !st.IsOK() || h.Scope != (messages.Scope{Assembly: "eu", Tier: messages.TierHDB}) {
			t.Errorf("%s: %v, scope %+v, want OK and eu hdb", api, st, h.Scope)
		}
		if walks != 0 {
			t.Errorf("%s: the arguments were walked %d more times for the scope, want none", api, walks)
		}
	}
	for api, args := range map[string]map[string]any{
		subjects.APIGetData: {"v": 1, "t": "trade", "s": "yesterday", "scope": "eu"},
		subjects.APIPing:    {"labels": map[string]any{"k": 5}, "scope": "eu"},
		subjects.APISQL:     {"query": 5, "scope": "eu"},
	} {
		walks = 0
		if _, st := check(api, args); st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "scope must be") {
			t.Errorf("%s: got %v, want BAD_REQUEST naming the scope", api, st)
		}
		if walks != 1 {
			t.Errorf("%s: refused arguments walked %d times for the scope, want 1", api, walks)
		}
	}
}
