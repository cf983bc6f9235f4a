package rc

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
)

func (f *fixture) submitAs(id, caller string) *nats.Subscription {
	f.t.Helper()
	replies, err := f.nc.SubscribeSync("reply." + id)
	if err != nil {
		f.t.Fatal(err)
	}
	args, _ := messages.Encode(&messages.GetDataArgs{Table: "trade"})
	data, err := messages.Encode(&messages.RCSubmission{
		V: messages.RCVersion, RequestID: id, GWID: "gw-1", Header: messages.RequestHeader{API: "getData"},
		Args: args, ReplyTo: "reply." + id, Content: messages.ContentMsgpack, Deadline: time.Now().Add(time.Minute).UnixNano(),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	h := nats.Header{}
	if caller != "" {
		h.Set(messages.HdrCaller, caller)
	}
	if err := f.nc.PublishMsg(&nats.Msg{Subject: f.s.RCSubmit("rc-1"), Header: h, Data: data}); err != nil {
		f.t.Fatal(err)
	}
	return replies
}

// Over the RC's queue limits the caller gets RATE_LIMITED, a text naming the limit,
// Sg-Limit and Sg-Retry-After (whole seconds); what was admitted stays.
func TestQueueLimitsAnswerRateLimited(t *testing.T) {
	f := startRC(t, func(c *Config) { c.MaxQueued, c.MaxQueuedPerCaller = 3, 1 })
	f.registerDAP("d1", false) // nothing runs: everything queues
	f.submitAs("q1", "alice")
	f.waitQueued(1)
	check := func(sub *nats.Subscription, limit string) {
		t.Helper()
		m := next(t, sub)
		st, err := messages.ReadStatus(m.Header)
		if err != nil {
			t.Fatal(err)
		}
		if st.RC != messages.CodeRateLimited || !strings.Contains(st.AI, limit+"=") {
			t.Fatalf("status %+v", st)
		}
		if got := m.Header.Get(messages.HdrLimit); got != limit {
			t.Fatalf("%s = %q, want %q", messages.HdrLimit, got, limit)
		}
		if n, err := strconv.Atoi(m.Header.Get(messages.HdrRetryAfter)); err != nil || n < 1 || n > int(retryafter.DefaultMax/time.Second) {
			t.Fatalf("%s = %q", messages.HdrRetryAfter, m.Header.Get(messages.HdrRetryAfter))
		}
	}
	check(f.submitAs("q2", "alice"), limits.CallerQueued)
	f.submitAs("q3", "bob")
	f.submitAs("q4", "") // no Sg-Caller: counted under ""
	f.waitQueued(3)
	check(f.submitAs("q5", "carol"), limits.RCQueued)
	// A caller key longer than the RC accepts is refused as a bad request.
	st, err := messages.ReadStatus(next(t, f.submitAs("q6", strings.Repeat("x", maxCallerLen+1))).Header)
	if err != nil || st.RC != messages.CodeBadRequest {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestLimitsFromEnv(t *testing.T) {
	env := map[string]string{EnvMaxQueued: "7"}
	look := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := Config{MaxQueuedPerCaller: 5}
	if err := c.LimitsFromEnv(look); err != nil || c.MaxQueued != 7 || c.MaxQueuedPerCaller != 5 {
		t.Fatalf("%+v %v", c, err)
	}
	env[EnvMaxQueuedPerCaller] = "-1"
	if err := c.LimitsFromEnv(look); err == nil || !strings.Contains(err.Error(), EnvMaxQueuedPerCaller) {
		t.Fatalf("err %v", err)
	}
}
