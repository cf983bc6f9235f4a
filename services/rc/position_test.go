package rc

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// A GW asks for a queued request's position by the client request id it
// sent; the RC reports to that GW's position subject. Queries for a request
// it does not hold, or garbage, get no report; the RC serves on.
func TestPositionReport(t *testing.T) {
	f := startRC(t)
	f.registerDAP("d1", false) // nothing runs: everything queues
	args, _ := messages.Encode(&messages.GetDataArgs{Table: "trade"})
	for i, id := range []string{"r1", "r2"} {
		data, err := messages.Encode(&messages.RCSubmission{V: messages.RCVersion, RequestID: id, GWID: "gw-1",
			Header: messages.RequestHeader{API: "getData"}, Args: args, ReplyTo: "reply." + id, Content: messages.ContentMsgpack,
			Deadline: time.Now().Add(time.Minute).UnixNano()})
		if err != nil {
			t.Fatal(err)
		}
		h := nats.Header{messages.HdrClientRequestID: []string{"job" + id}, messages.HdrCaller: []string{"_INBOX.x"}}
		if err := f.nc.PublishMsg(&nats.Msg{Subject: f.s.RCSubmit("rc-1"), Header: h, Data: data}); err != nil {
			t.Fatal(err)
		}
		f.waitQueued(i + 1)
	}
	reports, err := f.nc.SubscribeSync(f.s.GWPosition("gw-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, []byte("garbage")} {
		if err := f.nc.Publish(f.s.RCPosition("rc-1"), bad); err != nil {
			t.Fatal(err)
		}
	}
	f.publish(f.s.RCPosition("rc-1"), &messages.PositionQuery{V: messages.JobVersion, GWID: "gw-1", ClientRequestID: "nobody"})
	f.publish(f.s.RCPosition("rc-1"), &messages.PositionQuery{V: messages.JobVersion, GWID: "gw-1", ClientRequestID: "jobr1", Caller: "_INBOX.other"})
	f.publish(f.s.RCPosition("rc-1"), &messages.PositionQuery{V: messages.JobVersion, GWID: "gw-1", ClientRequestID: "jobr2"})
	// The first report is for jobr2: the queries before it were answered by silence.
	rep, err := messages.DecodeValid[messages.PositionReport](next(t, reports).Data)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ClientRequestID != "jobr2" || rep.RCID != "rc-1" || rep.Status != "allocating" || rep.Ahead != 1 || rep.Queued != 1 {
		t.Fatalf("report %+v", rep)
	}
}
