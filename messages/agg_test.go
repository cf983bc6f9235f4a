package messages

import (
	"errors"
	"testing"
)

func TestAggHeartbeatRoundTripAndValidate(t *testing.T) {
	hb := AggHeartbeat{V: AggVersion, AggID: "agg-1", Seq: 3, SentAt: 5, StartedAt: 1, IntervalMS: 2000, Pending: 2, HeldBytes: 10}
	b, err := Encode(&hb)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeValid[AggHeartbeat](b)
	if err != nil || got != hb {
		t.Fatalf("got %+v, %v", got, err)
	}
	for name, bad := range map[string]AggHeartbeat{
		"no version":   {AggID: "agg-1"},
		"newer":        {V: AggVersion + 1, AggID: "agg-1"},
		"bad id":       {V: AggVersion, AggID: "agg.1"},
		"empty id":     {V: AggVersion},
		"interval":     {V: AggVersion, AggID: "agg-1", IntervalMS: -1},
		"huge period":  {V: AggVersion, AggID: "agg-1", IntervalMS: maxHeartbeatMS + 1},
		"pending":      {V: AggVersion, AggID: "agg-1", Pending: -1},
		"negative mem": {V: AggVersion, AggID: "agg-1", HeldBytes: -1},
	} {
		b, err := Encode(&bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeValid[AggHeartbeat](b); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrVersion) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := DecodeValid[AggHeartbeat]([]byte{0xc1}); err == nil {
		t.Error("garbage accepted")
	}
}

// FuzzAggHeartbeat: decoding an Agg heartbeat from any bytes never panics, and what
// validates encodes again.
func FuzzAggHeartbeat(f *testing.F) {
	b, _ := Encode(&AggHeartbeat{V: AggVersion, AggID: "agg-1", IntervalMS: 2000})
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		hb, err := DecodeValid[AggHeartbeat](data)
		if err != nil {
			return
		}
		if _, err := Encode(&hb); err != nil {
			t.Fatalf("decoded but does not encode: %v", err)
		}
	})
}

// AggDone v2 carries a list; v1 (an older Agg's, one request a notice) and a
// newer version are refused as versions, so the log says which side is old.
func TestAggDoneVersions(t *testing.T) {
	ok := AggDone{V: AggDoneVersion, AggID: "agg-1", Done: []AggDoneEntry{{RequestID: "r1", Status: StatusOK}}}
	b, err := Encode(&ok)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeValid[AggDone](b); err != nil || len(got.Done) != 1 || got.Done[0].RequestID != "r1" {
		t.Fatalf("v%d: %+v, %v", AggDoneVersion, got, err)
	}
	for _, v := range []uint8{1, AggDoneVersion + 1} {
		old := ok
		old.V = v
		if err := old.Validate(); !errors.Is(err, ErrVersion) {
			t.Errorf("v%d: %v, want ErrVersion", v, err)
		}
	}
}

// TestDAPHeartbeatInterval: a DAP's heartbeat period is bounded as an Agg's.
func TestDAPHeartbeatInterval(t *testing.T) {
	for ms, ok := range map[int64]bool{0: true, 200: true, maxHeartbeatMS: true, -1: false, maxHeartbeatMS + 1: false, 1 << 62: false} {
		b, err := Encode(&DAPHeartbeat{V: DAPVersion, DAPID: "d1", IntervalMS: ms})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeValid[DAPHeartbeat](b); (err == nil) != ok {
			t.Errorf("interval %d ms: error %v, want accepted %v", ms, err, ok)
		} else if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("interval %d ms: %v, want ErrInvalid", ms, err)
		}
	}
}
