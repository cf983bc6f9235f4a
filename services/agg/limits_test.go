package agg

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/subjects"
)

// Over the Agg-wide bound on partials held, the request whose partial would pass it is
// answered RATE_LIMITED with Sg-Limit and Sg-Retry-After; the others go on. Over the
// per-request bound the answer is TOO_LARGE, named in Sg-Limit.
func TestAggLimits(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxHeldBytes, c.MaxRequestBytes = 1000, 700 })
	// blob is a valid msgpack payload of exactly n bytes (a bin of n-2 or n-3 bytes).
	blob := func(n int) []byte {
		h := 2
		if n-2 > 255 {
			h = 3
		}
		b, err := msgpack.Marshal(bytes.Repeat([]byte{1}, n-h))
		if err != nil || len(b) != n {
			t.Fatalf("blob of %d: %d bytes, %v", n, len(b), err)
		}
		return b
	}
	e.expect(expectation("req1", subjects.APIPing, nil, ref(1, 1), ref(2, 1)))
	e.partial(okPartial("req1", ref(1, 1), "dap0", blob(600)))
	e.expect(expectation("req2", subjects.APIPing, nil, ref(1, 1)))
	e.partial(okPartial("req2", ref(1, 1), "dap0", blob(500))) // 600+500 > 1000
	resp, h := e.answer()
	if resp.Header.RequestID != "req2" || resp.Header.RC != messages.CodeRateLimited ||
		!strings.Contains(resp.Header.AI, limits.AggHeldBytes+"=1000") {
		t.Fatalf("answer %+v", resp.Header)
	}
	if h.Get(messages.HdrLimit) != limits.AggHeldBytes {
		t.Fatalf("headers %v", h)
	}
	if n, err := strconv.Atoi(h.Get(messages.HdrRetryAfter)); err != nil || n < 1 {
		t.Fatalf("Retry-After %q", h.Get(messages.HdrRetryAfter))
	}
	// req1 goes on: one more byte over its own bound of 700 makes it TOO_LARGE.
	e.partial(okPartial("req1", ref(2, 1), "dap1", blob(101)))
	resp, h = e.answer()
	if resp.Header.RequestID != "req1" || resp.Header.RC != messages.CodeTooLarge ||
		!strings.Contains(resp.Header.AI, limits.AggRequestBytes+"=700") || h.Get(messages.HdrLimit) != limits.AggRequestBytes {
		t.Fatalf("answer %+v %v", resp.Header, h)
	}
	if s := e.agg.Stats(); s.Refused != 1 || s.TooLarge != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Everything was released: a request of 900 bytes fits again.
	e.expect(expectation("req3", subjects.APIPing, nil, ref(1, 1), ref(2, 1)))
	e.partial(okPartial("req3", ref(1, 1), "dap0", blob(450)))
	e.partial(okPartial("req3", ref(2, 1), "dap1", blob(200)))
	if resp, _ := e.answer(); resp.Header.RequestID != "req3" || resp.Header.RC != messages.CodeOK {
		t.Fatalf("answer %+v", resp.Header)
	}
}

func TestAggLimitsFromEnv(t *testing.T) {
	env := map[string]string{EnvMaxHeldBytes: "4096"}
	look := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := Config{MaxRequestBytes: 10}
	if err := c.LimitsFromEnv(look); err != nil || c.MaxHeldBytes != 4096 || c.MaxRequestBytes != 10 {
		t.Fatalf("%+v %v", c, err)
	}
	env[EnvMaxRequestBytes] = "lots"
	if err := c.LimitsFromEnv(look); err == nil {
		t.Fatal("accepted")
	}
}

// A chunked partial counts against the Agg-wide bound while it is still being
// reassembled: a sender that opens transfers and never finishes them cannot
// grow the Agg past MaxHeldBytes. Over it the transfer is dropped and its
// request refused; the bytes it held are released for the others.
func TestAggLimitsCountChunksInTransit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxHeldBytes, c.MaxRequestBytes = 4000, 1<<20 })
	e.expect(expectation("big", subjects.APIPing, nil, ref(1, 1)))
	bin := func(n int) []byte { // one msgpack value of about n bytes
		b, err := msgpack.Marshal(bytes.Repeat([]byte{1}, n))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p := okPartial("big", ref(1, 1), "dap0", bin(20000))
	b, err := messages.Encode(&p)
	if err != nil {
		t.Fatal(err)
	}
	h := dapHeader(p)
	chunks, err := messages.SplitChunksBody(subj.AggPartial("agg1"), h, messages.Body{b}, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// Every chunk but the last: the transfer never completes, yet passes the bound.
	for _, c := range chunks[:len(chunks)-1] {
		if err := e.nc.PublishMsg(c); err != nil {
			t.Fatal(err)
		}
	}
	resp, hdr := e.answer()
	if resp.Header.RequestID != "big" || resp.Header.RC != messages.CodeRateLimited || hdr.Get(messages.HdrLimit) != limits.AggHeldBytes {
		t.Fatalf("answer %+v %v, want RATE_LIMITED over %s", resp.Header, hdr, limits.AggHeldBytes)
	}
	// What the transfer held was released: a partial of 3,000 bytes fits.
	e.expect(expectation("small", subjects.APIPing, nil, ref(1, 1)))
	e.partial(okPartial("small", ref(1, 1), "dap0", bin(3000)))
	if resp, _ := e.answer(); resp.Header.RequestID != "small" || resp.Header.RC != messages.CodeOK {
		t.Fatalf("answer %+v", resp.Header)
	}
}
