package gw

import (
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
)

// answer is an RC's or Agg's answer as the core hands it over.
type answer struct {
	header nats.Header
	data   []byte
	err    error // the answer arrived but cannot be forwarded (too large, broken)
	chunk  bool  // data is chunk 0 of an answer relayed chunk by chunk (core/relay.go): sent as it is
	// relayed: the first message of an answer passed on as it comes
	// (core.Answer.Relayed); its outcome is counted with its last (relay).
	relayed bool
}

// errAnsweredInstead: the first message of an answer passed on as it comes
// was not sent; the caller was answered an error status instead (and that
// answer counted, whether or not it could be sent).
var errAnsweredInstead = errors.New("the caller was answered an error instead")

// forward sends an RC's or Agg's answer to the client unchanged; an error
// when it could not be published.
func (g *GW) forward(ri *reqInfo, a answer) error {
	if a.err != nil {
		if errors.Is(a.err, messages.ErrTooLarge) {
			return g.respondStatus(ri, messages.Errorf(messages.CodeTooLarge, messages.CodeErr, "Answer is too large for the gateway: %v; read it as a stream (request header %s: 1; getData, sql), which has no size limit, or page it (a limit and a narrower time range)", a.err, messages.HdrAcceptStream))
		}
		return g.respondStatus(ri, messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer could not be received whole: %v", a.err))
	}
	h := make(nats.Header, len(a.header)+2)
	for k, vs := range a.header {
		h[k] = vs
	}
	// Every drive runs under the GW's id (id~n after the first): the caller
	// sees its own id. A relayed chunk's envelope names it already.
	if got := h.Get(messages.HdrRequestID); got != ri.clientID {
		h.Set(messages.HdrRequestID, ri.clientID)
		if got != "" && !a.chunk {
			// The envelope's header only: the payload's bytes go on as they are.
			if c, err := messages.DetectContent(h, a.data); err == nil {
				if b, err := messages.RelabelResponse(c, a.data, ri.clientID); err == nil {
					a.data = b
				}
			}
		}
	}
	st, err := messages.ReadStatus(h)
	if err != nil {
		ri.log.Warn().Err(err).Msg("answer without a valid status header; forwarding it as is")
		st = messages.Status{RC: messages.CodeErr, AC: messages.CodeErr}
	}
	return g.sendAs(ri, h, a.data, st, a.relayed)
}

// relay sends one frame of an answer stream after its first (messages/stream.go),
// or one chunk of a chunked answer after its first, to the caller, as it came:
// only the ids in its headers are the caller's. The last (End) counts the
// answer's outcome: OK once it went out whole, else the error end's status.
// An error when it could not be published.
func (g *GW) relay(c core.Relay) error {
	ri := g.infoReq(c.Info)
	h := make(nats.Header, len(c.Header)+2)
	for k, vs := range c.Header {
		h[k] = vs
	}
	h.Set(messages.HdrRequestID, ri.clientID)
	messages.SetString(h, messages.HdrTraceID, ri.id)
	if !c.Status.IsOK() {
		c.Status.Write(h)
	}
	err := g.nc.PublishMsg(&nats.Msg{Subject: ri.reply, Header: h, Data: c.Data})
	if err != nil {
		g.met.sendFailed.Inc()
	}
	if c.End && (err == nil || !c.Status.IsOK()) {
		// Else the core ends the answer with its error end (RelayFailed),
		// which counts it.
		code := c.Status.RC
		if err != nil {
			code = messages.CodeErr
		}
		g.met.answered(ri.api, code, time.Since(ri.received))
	}
	switch {
	case err != nil:
		ri.log.Error().Err(err).Bool("end", c.End).Msg("message of an answer passed on as it comes not sent; ending the answer")
	case !c.Status.IsOK():
		ri.log.Warn().Str("ai", c.Status.AI).Msg("answer stream ended with an error")
	case c.End && h.Get(messages.HdrChunkIndex) != "":
		ri.log.Info().Str("transfer", h.Get(messages.HdrChunkStream)).Str("chunks", h.Get(messages.HdrChunkCount)).
			Str("bytes", h.Get(messages.HdrChunkTotal)).Dur("elapsed", time.Since(ri.received)).Msg("chunked answer relayed")
	case c.End:
		ri.log.Info().Str("stream", h.Get(messages.HdrStreamID)).Str("frames", h.Get(messages.HdrStreamSeq)).
			Dur("elapsed", time.Since(ri.received)).Msg("answer stream relayed")
	}
	return err
}

// respondStatus answers with a status and no payload, in the client's encoding.
func (g *GW) respondStatus(ri *reqInfo, st messages.Status) error {
	return g.respondStatusWith(ri, st, nil)
}

// respondStatusWith is respondStatus with extra headers (a limit's name and
// Sg-Retry-After).
func (g *GW) respondStatusWith(ri *reqInfo, st messages.Status, extra nats.Header) error {
	resp := messages.Response{
		Header:  messages.ResponseHeader{V: messages.RequestVersion, RequestID: ri.clientID, API: ri.api, LogCorr: ri.logCorr, Status: st},
		Content: ri.content,
	}
	body, err := resp.Encode()
	if err != nil { // a header alone always encodes; keep the client informed anyway
		ri.log.Error().Err(err).Msg("encode error answer")
	}
	h := nats.Header{}
	for k, vs := range extra {
		h[k] = vs
	}
	st.Write(h)
	messages.SetString(h, messages.HdrRequestID, ri.clientID)
	messages.SetString(h, messages.HdrAPI, ri.api)
	messages.SetString(h, messages.HdrLogCorr, ri.logCorr)
	messages.SetString(h, messages.HdrContentType, string(ri.content))
	return g.send(ri, h, body, st)
}

// send publishes an answer on the client's reply subject, in chunks when it
// is above the max payload, and records it; an error when it could not be
// published.
func (g *GW) send(ri *reqInfo, h nats.Header, body []byte, st messages.Status) error {
	return g.sendAs(ri, h, body, st, false)
}

// sendAs is send; relayed: body is the first message of an answer passed on
// as it comes, whose outcome is counted with its last (relay).
func (g *GW) sendAs(ri *reqInfo, h nats.Header, body []byte, st messages.Status, relayed bool) error {
	// The caller's id is a label; this is the id every log line inside sg
	// carries, for the caller to quote when something went wrong.
	messages.SetString(h, messages.HdrTraceID, ri.id)
	var err error
	chunks := 1
	if ri.reply != "" {
		switch {
		case int64(len(body))+int64(messages.HeaderSize(h)) <= g.nc.MaxPayload():
			err = g.nc.PublishMsg(&nats.Msg{Subject: ri.reply, Header: h, Data: body})
		case h.Get(messages.HdrChunkIndex) != "":
			// Chunk 0 of an answer passed on as it comes (core/relay.go) that
			// no longer fits (a server with a smaller max payload since): cut
			// again, it would be a transfer of its own, complete and cut.
			ri.log.Error().Int("bytes", len(body)).Int64("max_payload", g.nc.MaxPayload()).Msg("first chunk of an answer above max payload: not passed on")
			// Answered (and counted) here, sent or not: the core drops the
			// relay rather than end it and count it again.
			if err := g.respondStatus(ri, messages.Errorf(messages.CodeErr, messages.CodeErr,
				"Answer could not be passed on: its first chunk of %d bytes is above the max payload of %d bytes", len(body), g.nc.MaxPayload())); err != nil {
				return errors.Join(errAnsweredInstead, err)
			}
			return errAnsweredInstead
		case ri.chunks:
			chunks, err = messages.SendChunked(g.nc, ri.reply, h, body, 0)
		default:
			// A plain NATS request would see the first chunk only: a cut
			// document. Say what the answer is and how to get it instead.
			ri.log.Info().Int("bytes", len(body)).Msg("answer above max payload for a caller that does not reassemble chunks")
			g.storeForCaller(ri, h, body)
			return nil
		}
	}
	size := len(body)
	if h.Get(messages.HdrChunkIndex) == "0" {
		// Chunk 0 of an answer relayed as it comes (core/relay.go): its size
		// and chunks are the whole answer's.
		chunks, _ = strconv.Atoi(h.Get(messages.HdrChunkCount))
		size, _ = strconv.Atoi(h.Get(messages.HdrChunkTotal))
	}
	elapsed := time.Since(ri.received)
	ev := ri.log.Info()
	if err != nil {
		g.met.sendFailed.Inc()
		ev = ri.log.Error().Err(err)
	}
	switch {
	case relayed:
		// Counted when it ends (relay), whole or broken.
	case err != nil:
		g.met.answered(ri.api, messages.CodeErr, elapsed)
	default:
		g.met.answered(ri.api, st.RC, elapsed)
	}
	ev.Str("rc", st.RC.String()).Str("ac", st.AC.String()).Str("ai", st.AI).Int("bytes", size).
		Int("chunks", chunks).Dur("elapsed", elapsed).Msg("request answered")
	return err
}
