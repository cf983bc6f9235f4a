package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// Async over HTTP (issue 11):
//
//	POST /v1/{api} with "Prefer: respond-async"  202 Accepted, Retry-After,
//	                      Location: /v1/jobs/{id}, the JSON envelope whose
//	                      payload is the job's status (messages.JobStatus);
//	                      "Idempotency-Key: k" returns the same job for the
//	                      same k (scoped to the caller: this adapter)
//	GET /v1/jobs/{id}     202 + Retry-After while it runs; then the request's
//	                      own answer (200 with the envelope, or the error
//	                      envelope with its status); 404 UNKNOWN_JOB, 410 EXPIRED

const (
	hdrPrefer         = "Prefer"
	hdrIdempotencyKey = "Idempotency-Key"
)

// wantsAsync: RFC 7240's respond-async preference, among others.
func wantsAsync(r *http.Request) bool {
	for _, v := range r.Header.Values(hdrPrefer) {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(strings.SplitN(p, ";", 2)[0]), "respond-async") {
				return true
			}
		}
	}
	return false
}

// asyncEnvelope sets opts.async and opts.idempotencyKey in the JSON envelope
// from the HTTP headers; without them the envelope is unchanged.
func asyncEnvelope(env []byte, r *http.Request) ([]byte, messages.Status) {
	async, key := wantsAsync(r), r.Header.Get(hdrIdempotencyKey)
	if !async && key == "" {
		return env, messages.Status{}
	}
	if len(key) > messages.MaxIdempotencyKeyLen {
		return nil, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Idempotency-Key above %d bytes", messages.MaxIdempotencyKeyLen)
	}
	var e map[string]json.RawMessage
	if err := json.Unmarshal(env, &e); err != nil {
		return nil, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request envelope: %v", err)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(e["header"], &hdr); err != nil || hdr == nil {
		return nil, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request envelope has no header object")
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := hdr["opts"]; ok {
		if err := json.Unmarshal(raw, &opts); err != nil || opts == nil {
			return nil, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request envelope header.opts is not an object")
		}
	}
	if async {
		opts["async"] = json.RawMessage("true")
	}
	if key != "" {
		b, _ := json.Marshal(key)
		opts["idempotencyKey"] = b
	}
	hdr["opts"], _ = json.Marshal(opts)
	e["header"], _ = json.Marshal(hdr)
	out, err := json.Marshal(e)
	if err != nil {
		return nil, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request envelope: %v", err)
	}
	return out, messages.Status{}
}

// serveJob answers GET /v1/jobs/{id} from the GW (subjects.GWJob).
func (s *Server) serveJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	reqID := r.Header.Get(hdrRequestID)
	if reqID == "" || subjects.Validate("request id", reqID) != nil {
		reqID = nuid.Next()
	}
	if subjects.Validate("job id", id) != nil {
		writeStatus(w, reqID, "job", messages.Errorf(messages.CodeUnknownJob, messages.CodeErr, "No job %q", truncate(id, 64)))
		return
	}
	log := s.cfg.Log.With().Str("request_id", reqID).Str("job_id", id).Logger()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.HealthTimeout+s.cfg.Wait)
	defer cancel()
	s.callSubject(ctx, w, r, log, s.cfg.Subjects.GWJob(), nats.Header{messages.HdrJobID: []string{id}}, "job", reqID, nil, s.cfg.Wait)
}
