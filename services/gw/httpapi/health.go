package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// Health is the body of GET /v1/health.
type Health struct {
	Ready   bool   `json:"ready"`
	DAPs    int    `json:"daps"`    // DAPs the RC knows
	Reached int    `json:"reached"` // of those, heard from within their heartbeat interval
	Reason  string `json:"reason,omitempty"`
}

// serveHealth is ready only when the whole path answers: the GW takes a ping,
// an RC runs it, and at least one DAP is reached. A GW that is up with no RC
// or no DAP yet is not ready to serve data, whatever its process says.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	h := s.health(r.Context())
	w.Header().Set("Content-Type", contentJSON)
	if h.Ready {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h)
}

func (s *Server) health(ctx context.Context) Health {
	if s.cfg.GatewayReady != nil {
		if ok, why := s.cfg.GatewayReady(); !ok {
			return Health{Reason: "the gateway is not ready: " + why}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout+waitMargin)
	defer cancel()
	env, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIPing,
		Opts: messages.Opts{TimeoutMS: s.cfg.HealthTimeout.Milliseconds()}}, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return Health{Reason: "ping could not be encoded: " + err.Error()}
	}
	reply := s.inbox + ".h" + strconv.FormatUint(s.next.Add(1), 36)
	ch := s.wait(reply, s.cfg.Log)
	defer s.done(reply)
	hdr := nats.Header{}
	messages.SetString(hdr, messages.HdrContentType, string(messages.ContentJSON))
	messages.SetString(hdr, messages.HdrRequestID, "health-"+nuid.Next())
	if err := s.nc.PublishMsg(&nats.Msg{Subject: s.cfg.Subjects.GWAPI(subjects.APIPing), Reply: reply, Header: hdr, Data: env}); err != nil {
		return Health{Reason: "the gateway could not be reached: " + err.Error()}
	}
	m, err := ch.next(ctx, nil)
	if err != nil {
		// A GW holds requests until it knows an RC that can serve.
		return Health{Reason: "no answer from the gateway to a ping: no gateway, or none knows an RC that can serve yet"}
	}
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		return Health{Reason: "the ping's answer could not be decoded: " + err.Error()}
	}
	if !resp.Header.Status.IsOK() {
		return Health{Reason: "ping answered " + resp.Header.RC.String() + ": " + resp.Header.AI}
	}
	var daps []struct {
		Reached bool `json:"reached"`
	}
	if err := json.Unmarshal(resp.Payload, &daps); err != nil {
		return Health{Reason: "the ping's answer is not a list of DAPs: " + err.Error()}
	}
	h := Health{DAPs: len(daps)}
	for _, d := range daps {
		if d.Reached {
			h.Reached++
		}
	}
	switch {
	case h.DAPs == 0:
		h.Reason = "the RC knows no DAP yet"
	case h.Reached == 0:
		h.Reason = "no DAP was heard from within its heartbeat interval"
	default:
		h.Ready = true
	}
	return h
}

//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", contentJSON)
	_, _ = w.Write(openAPI)
}
