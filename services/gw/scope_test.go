package gw_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
)

// TestAssemblyKeyAndScopeInEveryEncoding: a GW told the assembly key reads
// an RC's assembly from its labels (seed: KXI_ASSEMBLY_KEY); the scope in
// the arguments routes in msgpack as in JSON; a scope that is not an object
// is refused BAD_REQUEST, never run unscoped.
func TestAssemblyKeyAndScopeInEveryEncoding(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.AssemblyKey = "kx.com/assembly" })
	e.fakeRC("global", "", e.echo("global"))
	// Announced with a label only: the GW must take the assembly from it.
	e.fakeRCLabelled("asm-eu", map[string]string{"kx.com/assembly": "eu", "team": "x"}, e.echo("asm-eu"))
	// An RC that names itself "us" without the label is global for this GW.
	e.fakeRC("named-us", "us", e.echo("named-us"))

	mp := func(args map[string]any) []byte {
		t.Helper()
		payload, err := msgpack.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: payload,
			Content: messages.ContentMsgpack}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	mpHdr := nats.Header{messages.HdrContentType: {"msgpack"}}
	if got := rcOfRaw(t, e.raw(subjects.APIGetData, mpHdr, mp(map[string]any{"v": 1, "t": "t", "scope": map[string]any{"assembly": "eu"}}))); got != "asm-eu" {
		t.Errorf("msgpack scope eu -> %q, want asm-eu", got)
	}
	if got := rcOfRaw(t, e.raw(subjects.APIGetData, nil, []byte(`{"header":{"api":"getData"},"payload":{"table":"t","scope":{"assembly":"eu"}}}`))); got != "asm-eu" {
		t.Errorf("JSON scope eu -> %q, want asm-eu", got)
	}
	if got := rcOfRaw(t, e.raw(subjects.APIGetData, mpHdr, mp(map[string]any{"v": 1, "t": "t", "scope": map[string]any{"assembly": "us"}}))); got != gw.TextNoResources {
		t.Errorf("msgpack scope us (no RC labelled us) -> %q, want %q", got, gw.TextNoResources)
	}
	for name, body := range map[string][]byte{
		"json string": []byte(`{"header":{"api":"getData"},"payload":{"table":"t","scope":"eu"}}`),
		"json list":   []byte(`{"header":{"api":"getData"},"payload":{"table":"t","scope":["eu"]}}`),
		"msgpack str": mp(map[string]any{"v": 1, "t": "t", "scope": "eu"}),
		"msgpack int": mp(map[string]any{"v": 1, "t": "t", "scope": 5}),
	} {
		h := nats.Header(nil)
		if strings.HasPrefix(name, "msgpack") {
			h = mpHdr
		}
		st := e.raw(subjects.APIGetData, h, body).Header.Status
		if st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "scope must be") {
			t.Errorf("%s: got %v, want BAD_REQUEST naming the scope", name, st)
		}
	}
}

func rcOfRaw(t *testing.T, r messages.Response) string {
	t.Helper()
	if !r.Header.Status.IsOK() {
		return r.Header.Status.AI
	}
	var m map[string]string
	var err error
	if r.Content == messages.ContentJSON {
		err = json.Unmarshal(r.Payload, &m)
	} else {
		err = msgpack.Unmarshal(r.Payload, &m)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m["rc"]
}

// fakeRCLabelled is fakeRC for an RC that announces labels and no assembly name.
func (e *env) fakeRCLabelled(id string, labels map[string]string, answer func(sub messages.RCSubmission)) {
	e.t.Helper()
	sub, err := e.nc.Subscribe(e.s.RCSubmit(id), func(m *nats.Msg) {
		s, err := messages.DecodeValid[messages.RCSubmission](m.Data)
		if err != nil {
			e.t.Errorf("fake RC %s: bad submission: %v", id, err)
			return
		}
		answer(s)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	ann, _ := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: id, Labels: labels, StartedAt: 1})
	if err := e.nc.Publish(e.s.RCAnnounce(id), ann); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.gw.WaitRCs(ctx, func(rcs []gw.RCInfo) bool {
		for _, rc := range rcs {
			if rc.ID == id {
				return rc.Assembly == labels["kx.com/assembly"]
			}
		}
		return false
	}); err != nil {
		e.t.Fatalf("GW never saw RC %s: %v", id, err)
	}
}
