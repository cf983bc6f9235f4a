package messages

import (
	"strings"
	"testing"
)

func TestDriveID(t *testing.T) {
	for _, tc := range []struct {
		n    uint32
		want string
	}{{0, "abc"}, {1, "abc~1"}, {12, "abc~12"}, {4294967295, "abc~4294967295"}} {
		if got := DriveID("abc", tc.n); got != tc.want {
			t.Errorf("DriveID(abc, %d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestRecoveryMessagesRejectBadInput(t *testing.T) {
	good := LogEntry{V: 1, RequestID: "req", State: LogOpen, GWID: "gw-1", ClientReply: "_INBOX.x", API: "getData", Content: ContentJSON,
		Submission: RCSubmission{V: 1, RequestID: "req", GWID: "gw-1", Header: RequestHeader{V: 1, API: "getData"},
			ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentJSON, Deadline: 1}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*LogEntry){
		"state":   func(e *LogEntry) { e.State = "lost" },
		"gw":      func(e *LogEntry) { e.GWID = "a.b" },
		"request": func(e *LogEntry) { e.RequestID = "" },
		"reply":   func(e *LogEntry) { e.ClientReply = "" },
		"content": func(e *LogEntry) { e.Content = "xml" },
		"sub":     func(e *LogEntry) { e.Submission.Deadline = 0 },
	} {
		e := good
		mutate(&e)
		if err := e.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	hb := GWHeartbeat{V: 1, GWID: "gw-1", StartedAt: 1}
	if err := hb.Validate(); err == nil || !strings.Contains(err.Error(), "interval") {
		t.Errorf("heartbeat without interval: %v", err)
	}
	b := PeerStatusBlock{V: 1, RequestID: "r", RCID: "rc-2"}
	if err := b.Validate(); err == nil {
		t.Error("empty block accepted")
	}
}

// The `answered` record's header is read back from the network: anything
// but "<GW id> <incarnation> <drive>", bounded, is refused.
func TestParseLogAnsweredHostile(t *testing.T) {
	if e, err := ParseLogAnswered("r1", "gw1 12 3"); err != nil || e.GWID != "gw1" || e.GWStarted != 12 || e.Drive != 3 {
		t.Fatalf("got %#v, %v", e, err)
	}
	long := "gw1 1 " + strings.Repeat("1", 200)
	e := LogEntry{By: "gw1", GWStarted: 12, Drive: 3}
	if v := string(AppendLogAnswered(nil, &e)); v != "gw1 12 3" {
		t.Fatalf("written as %q", v)
	}
	for _, v := range []string{"", "gw1", "gw1 1", "gw1 x 1", "gw1 1 x", "gw1 1 -1", "gw1 1 4294967296", "g.w 1 1", "* 1 1",
		"gw1  1 1", "gw1 1 1 1", long} {
		if e, err := ParseLogAnswered("r1", v); err == nil {
			t.Errorf("%q accepted as %#v", v, e)
		}
	}
}
