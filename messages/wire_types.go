package messages

// The hand codecs of wire.go, one pair per message of a small request's path.
// Each writes the keys of the type's msgpack tags, omitting what the tag's
// omitempty omits, and reads any key order, skipping keys it does not know.

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// ---- client envelopes (request.go) ----

// content reads a Content; the two known ones cost no allocation.
func (r *wireReader) content(p *Content) error {
	b, err := r.bytesTemp()
	switch string(b) {
	case string(ContentMsgpack):
		*p = ContentMsgpack
	case string(ContentJSON):
		*p = ContentJSON
	default:
		*p = Content(b)
	}
	return err
}

func (w *wireWriter) opts(o Opts) {
	f := w.openMap()
	f.intOmit("timeout", o.TimeoutMS)
	f.strOmit("logCorr", o.LogCorr)
	f.boolOmit("async", o.Async)
	f.strOmit("idempotencyKey", o.IdempotencyKey)
	f.close()
}

func (r *wireReader) opts(o *Opts) error {
	return wireFields(r, o, "opts", func(k []byte) error {
		switch string(k) {
		case "timeout":
			return r.i64(&o.TimeoutMS)
		case "logCorr":
			return r.string(&o.LogCorr)
		case "async":
			return r.boolean(&o.Async)
		case "idempotencyKey":
			return r.string(&o.IdempotencyKey)
		}
		return r.skip()
	})
}

func (w *wireWriter) scope(s Scope) {
	f := w.openMap()
	f.strOmit("assembly", s.Assembly)
	f.strOmit("tier", string(s.Tier))
	f.close()
}

func (r *wireReader) scope(s *Scope) error {
	return wireFields(r, s, "scope", func(k []byte) error {
		switch string(k) {
		case "assembly":
			return r.string(&s.Assembly)
		case "tier":
			v, err := r.str()
			s.Tier = Tier(v)
			return err
		}
		return r.skip()
	})
}

// A struct field with omitempty is omitted when every field of the struct
// is omitempty and empty (the reflection encoder's rule).
func (w *wireWriter) requestHeader(h RequestHeader) {
	f := w.openMap()
	f.uintOmit("v", uint64(h.V))
	f.str("api", h.API)
	if h.Opts != (Opts{}) {
		f.key("opts")
		w.opts(h.Opts)
	}
	if h.Scope != (Scope{}) {
		f.key("scope")
		w.scope(h.Scope)
	}
	f.close()
}

func (r *wireReader) requestHeader(h *RequestHeader) error {
	return wireFields(r, h, "header", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&h.V)
		case "api":
			return r.string(&h.API)
		case "opts":
			return r.opts(&h.Opts)
		case "scope":
			return r.scope(&h.Scope)
		}
		return r.skip()
	})
}

func (w *wireWriter) responseHeader(h ResponseHeader) {
	f := w.openMap()
	f.uint("v", uint64(h.V))
	f.strOmit("requestId", h.RequestID)
	f.strOmit("api", h.API)
	f.strOmit("logCorr", h.LogCorr)
	f.intOmit("retryAfter", h.RetryAfterMS)
	f.statusFields(h.Status)
	f.close()
}

func (r *wireReader) responseHeader(h *ResponseHeader) error {
	return wireFields(r, h, "header", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&h.V)
		case "requestId":
			return r.string(&h.RequestID)
		case "api":
			return r.string(&h.API)
		case "logCorr":
			return r.string(&h.LogCorr)
		case "retryAfter":
			return r.i64(&h.RetryAfterMS)
		}
		if ok, err := r.statusField(k, &h.Status); ok {
			return err
		}
		return r.skip()
	})
}

// envelopeHeader is the header of a client envelope.
type envelopeHeader interface{ RequestHeader | ResponseHeader }

// wireEnvelope is the msgpack envelope {"header": H, "payload": raw} of a
// request (H = RequestHeader) or a response (ResponseHeader).
type wireEnvelope[H envelopeHeader] struct {
	header  H
	payload []byte
}

func (e *wireEnvelope[H]) appendWire(w *wireWriter) {
	f := w.openMap()
	appendEnvelopeHeader(&f, e.header)
	f.rawOmit("payload", e.payload)
	f.close()
}

// wireEnvelopeHead is a wireEnvelope's bytes up to its payload, which
// follows them (encodeEnvelopeBody): the map holds the header and the key.
type wireEnvelopeHead[H envelopeHeader] struct{ header H }

func (e wireEnvelopeHead[H]) appendWire(w *wireWriter) {
	f := w.openMap()
	appendEnvelopeHeader(&f, e.header)
	f.key("payload")
	f.close()
}

func appendEnvelopeHeader[H envelopeHeader](f *wireMap, header H) {
	f.key("header")
	switch h := any(header).(type) {
	case RequestHeader:
		f.w.requestHeader(h)
	case ResponseHeader:
		f.w.responseHeader(h)
	}
}

func (e *wireEnvelope[H]) decodeWire(r *wireReader) error {
	return wireFields(r, e, "envelope", func(k []byte) error {
		switch string(k) {
		case "header":
			switch h := any(&e.header).(type) {
			case *RequestHeader:
				return r.requestHeader(h)
			case *ResponseHeader:
				return r.responseHeader(h)
			}
		case "payload":
			var err error
			e.payload, err = r.rawShared()
			return err
		}
		return r.skip()
	})
}

// ---- RC (rc.go) ----

func (m RCAnnouncement) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("rc", m.RCID)
	f.strOmit("asm", m.Assembly)
	f.strOmit("addr", m.Addr)
	f.int("out", int64(m.Outstanding))
	f.int("queued", int64(m.Queued))
	f.int("daps", int64(m.DAPs))
	f.boolOmit("draining", m.Draining)
	f.int("started", m.StartedAt)
	f.labelsOmit("labels", m.Labels)
	f.boolOmit("warming", m.Warming)
	f.close()
}

func (m *RCAnnouncement) decodeWire(r *wireReader) error {
	return wireFields(r, m, "RC announcement", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "rc":
			return r.string(&m.RCID)
		case "asm":
			return r.string(&m.Assembly)
		case "addr":
			return r.string(&m.Addr)
		case "out":
			return r.intN(&m.Outstanding)
		case "queued":
			return r.intN(&m.Queued)
		case "daps":
			return r.intN(&m.DAPs)
		case "draining":
			return r.boolean(&m.Draining)
		case "started":
			return r.i64(&m.StartedAt)
		case "labels":
			return r.labels(&m.Labels)
		case "warming":
			return r.boolean(&m.Warming)
		}
		return r.skip()
	})
}

func (m RCSubmission) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("req", m.RequestID)
	f.str("gw", m.GWID)
	f.key("header")
	w.requestHeader(m.Header)
	f.rawOmit("args", m.Args)
	f.binOmit("argsj", m.ArgsJSON)
	f.str("reply", m.ReplyTo)
	f.str("content", string(m.Content))
	f.int("deadline", m.Deadline)
	f.int("rcvd", m.ReceivedAt)
	f.boolOmit("stream", m.Stream)
	f.strOmit("aid", m.AnswerID)
	f.boolOmit("sstart", m.StreamStart)
	f.close()
}

func (m *RCSubmission) decodeWire(r *wireReader) error {
	return wireFields(r, m, "RC submission", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "req":
			return r.string(&m.RequestID)
		case "gw":
			return r.string(&m.GWID)
		case "header":
			return r.requestHeader(&m.Header)
		case "args":
			return r.rawMsgpack(&m.Args)
		case "argsj":
			return r.bytes(&m.ArgsJSON)
		case "reply":
			return r.string(&m.ReplyTo)
		case "content":
			return r.content(&m.Content)
		case "deadline":
			return r.i64(&m.Deadline)
		case "rcvd":
			return r.i64(&m.ReceivedAt)
		case "stream":
			return r.boolean(&m.Stream)
		case "aid":
			return r.string(&m.AnswerID)
		case "sstart":
			return r.boolean(&m.StreamStart)
		}
		return r.skip()
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder (inside a LogEntry).
func (m RCSubmission) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, m) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *RCSubmission) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, m) }

// ---- portions (portion.go) ----

func (m PortionDispatch) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("req", m.RequestID)
	f.portionID("id", m.PortionID)
	f.uint("att", uint64(m.Attempt))
	f.str("rc", m.RCID)
	f.str("api", m.API)
	f.rawOmit("args", m.Args)
	f.binOmit("argsj", m.ArgsJSON)
	f.labels("labels", m.Labels)
	f.timeRange("range", m.Range)
	f.uint("pv", m.PurviewVersion)
	f.uint("rv", m.ReferenceVintage)
	f.str("agg", m.AggID)
	f.int("deadline", m.Deadline)
	f.strOmit("corr", m.LogCorr)
	f.close()
}

func (m *PortionDispatch) decodeWire(r *wireReader) error {
	return wireFields(r, m, "portion dispatch", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "req":
			return r.string(&m.RequestID)
		case "id":
			return r.portionID(&m.PortionID)
		case "att":
			return r.u32(&m.Attempt)
		case "rc":
			return r.string(&m.RCID)
		case "api":
			return r.string(&m.API)
		case "args":
			return r.rawMsgpack(&m.Args)
		case "argsj":
			return r.bytes(&m.ArgsJSON)
		case "labels":
			return r.labels(&m.Labels)
		case "range":
			return r.timeRange(&m.Range)
		case "pv":
			return r.u64(&m.PurviewVersion)
		case "rv":
			return r.u64(&m.ReferenceVintage)
		case "agg":
			return r.string(&m.AggID)
		case "deadline":
			return r.i64(&m.Deadline)
		case "corr":
			return r.string(&m.LogCorr)
		}
		return r.skip()
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder (inside a PeerPortion).
func (m PortionDispatch) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, m) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *PortionDispatch) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, m) }

func (m PortionCompletion) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("req", m.RequestID)
	f.portionID("id", m.PortionID)
	f.uint("att", uint64(m.Attempt))
	f.str("dap", m.DAPID)
	f.uint("out", uint64(m.Outcome))
	f.uint("code", uint64(m.Code))
	f.strOmit("msg", m.Message)
	f.boolOmit("sent", m.PartialSent)
	f.uint("pv", m.PurviewVersion)
	f.uint("rv", m.ReferenceVintage)
	f.intOmit("rows", m.Rows)
	f.intOmit("bytes", m.Bytes)
	f.intOmit("elapsed", m.ElapsedNS)
	if m.Purview != nil {
		f.timeRange("pw", *m.Purview)
	}
	f.close()
}

func (m *PortionCompletion) decodeWire(r *wireReader) error {
	return wireFields(r, m, "portion completion", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "req":
			return r.string(&m.RequestID)
		case "id":
			return r.portionID(&m.PortionID)
		case "att":
			return r.u32(&m.Attempt)
		case "dap":
			return r.string(&m.DAPID)
		case "out":
			var v uint8
			err := r.u8(&v)
			m.Outcome = Outcome(v)
			return err
		case "code":
			return r.code16(&m.Code)
		case "msg":
			return r.string(&m.Message)
		case "sent":
			return r.boolean(&m.PartialSent)
		case "pv":
			return r.u64(&m.PurviewVersion)
		case "rv":
			return r.u64(&m.ReferenceVintage)
		case "rows":
			return r.i64(&m.Rows)
		case "bytes":
			return r.i64(&m.Bytes)
		case "elapsed":
			return r.i64(&m.ElapsedNS)
		case "pw":
			if r.pos < len(r.b) && r.b[r.pos] == 0xc0 { // nil: no purview, as the reflection decoder reads it
				r.pos++
				m.Purview = nil
				return nil
			}
			if m.Purview == nil {
				m.Purview = new(TimeRange)
			}
			return r.timeRange(m.Purview)
		}
		return r.skip()
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m PortionCompletion) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, m) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *PortionCompletion) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, m) }

func (m PartialResult) appendWire(w *wireWriter) {
	_ = m.appendFields(w, func(f *wireMap) error { f.rawOmit("payload", m.Payload); return nil })
}

// appendFields writes m with its payload written by payload.
func (m *PartialResult) appendFields(w *wireWriter, payload func(f *wireMap) error) error {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("req", m.RequestID)
	f.portionID("id", m.PortionID)
	f.uint("att", uint64(m.Attempt))
	f.str("dap", m.DAPID)
	f.status("status", m.Status)
	if err := payload(&f); err != nil {
		return err
	}
	f.uintOmit("win", uint64(m.Window))
	f.boolOmit("more", m.More)
	f.close()
	return nil
}

// AppendPartialResult appends m's msgpack form (Encode's bytes) to b, its
// payload written in place by payload, which m.Payload must leave empty: a
// DAP's window is encoded once, into the buffer it is published from (NATS
// copies it, so the buffer serves the next window), not into a buffer of its
// own and then copied into the envelope. It returns the payload's size too.
func AppendPartialResult(b []byte, m *PartialResult, payload func(*msgpack.Encoder) error) ([]byte, int, error) {
	if len(m.Payload) > 0 {
		return b, 0, fmt.Errorf("messages: append partial result: a payload both given and to write")
	}
	w := wireWriter{b: b}
	size := 0
	err := m.appendFields(&w, func(f *wireMap) error {
		f.key("payload")
		start := len(w.b)
		buf := bytes.NewBuffer(w.b)
		enc := msgpack.GetEncoder()
		enc.Reset(buf)
		err := payload(enc)
		msgpack.PutEncoder(enc)
		w.b = buf.Bytes()
		size = len(w.b) - start
		return err
	})
	if err != nil {
		return b, 0, fmt.Errorf("messages: append partial result: %w", err)
	}
	return w.b, size, nil
}

func (m *PartialResult) decodeWire(r *wireReader) error {
	return wireFields(r, m, "partial result", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "req":
			return r.string(&m.RequestID)
		case "id":
			return r.portionID(&m.PortionID)
		case "att":
			return r.u32(&m.Attempt)
		case "dap":
			return r.string(&m.DAPID)
		case "status":
			return r.status(&m.Status)
		case "payload":
			return r.rawSg(&m.Payload)
		case "win":
			return r.u32(&m.Window)
		case "more":
			return r.boolean(&m.More)
		}
		return r.skip()
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m PartialResult) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, m) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *PartialResult) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, m) }

func (m AggExpectation) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("req", m.RequestID)
	f.uint("seq", uint64(m.Seq))
	f.str("api", m.API)
	f.rawOmit("args", m.Args)
	f.binOmit("argsj", m.ArgsJSON)
	f.refsOmit("expect", m.Expect)
	f.refsOmit("supersede", m.Supersede)
	f.boolOmit("sealed", m.Sealed)
	f.boolOmit("cancel", m.Cancel)
	f.str("reply", m.ReplyTo)
	f.strOmit("rc", m.RCID)
	f.strOmit("content", string(m.Content))
	f.int("deadline", m.Deadline)
	f.strOmit("corr", m.LogCorr)
	f.boolOmit("stream", m.Stream)
	f.strOmit("aid", m.AnswerID)
	f.boolOmit("sstart", m.StreamStart)
	f.close()
}

func (m *AggExpectation) decodeWire(r *wireReader) error {
	return wireFields(r, m, "Agg expectation", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "req":
			return r.string(&m.RequestID)
		case "seq":
			return r.u32(&m.Seq)
		case "api":
			return r.string(&m.API)
		case "args":
			return r.rawMsgpack(&m.Args)
		case "argsj":
			return r.bytes(&m.ArgsJSON)
		case "expect":
			return r.refs(&m.Expect)
		case "supersede":
			return r.refs(&m.Supersede)
		case "sealed":
			return r.boolean(&m.Sealed)
		case "cancel":
			return r.boolean(&m.Cancel)
		case "reply":
			return r.string(&m.ReplyTo)
		case "rc":
			return r.string(&m.RCID)
		case "content":
			return r.content(&m.Content)
		case "deadline":
			return r.i64(&m.Deadline)
		case "corr":
			return r.string(&m.LogCorr)
		case "stream":
			return r.boolean(&m.Stream)
		case "aid":
			return r.string(&m.AnswerID)
		case "sstart":
			return r.boolean(&m.StreamStart)
		}
		return r.skip()
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m AggExpectation) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, m) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *AggExpectation) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, m) }

func (m AggDone) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.str("agg", m.AggID)
	f.key("done")
	if m.Done == nil {
		w.nil()
	} else {
		w.arrayLen(len(m.Done))
		for _, e := range m.Done {
			g := w.openMap()
			g.str("req", e.RequestID)
			g.status("status", e.Status)
			g.boolOmit("timedOut", e.TimedOut)
			g.intOmit("held", e.Held)
			g.close()
		}
	}
	f.close()
}

func (m *AggDone) decodeWire(r *wireReader) error {
	return wireFields(r, m, "Agg done", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "agg":
			return r.string(&m.AggID)
		case "done":
			return r.aggDoneEntries(&m.Done)
		}
		return r.skip()
	})
}

// aggDoneEntries reads an AggDone's entries.
func (r *wireReader) aggDoneEntries(p *[]AggDoneEntry) error {
	return wireStructs(r, p, "Agg done entries", func() (e AggDoneEntry, err error) {
		err = wireFields(r, &e, "Agg done entry", func(k []byte) error {
			switch string(k) {
			case "req":
				return r.string(&e.RequestID)
			case "status":
				return r.status(&e.Status)
			case "timedOut":
				return r.boolean(&e.TimedOut)
			case "held":
				return r.i64(&e.Held)
			}
			return r.skip()
		})
		return e, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m AggDone) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, m) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *AggDone) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, m) }

// ---- request log (recovery.go): written at least twice per request ----

func (m LogEntry) appendWire(w *wireWriter) {
	f := w.openMap()
	f.uint("v", uint64(m.V))
	f.boolOmit("chunks", m.Chunks)
	f.str("req", m.RequestID)
	f.strOmit("clientReq", m.ClientRequestID)
	f.strOmit("caller", m.Caller)
	f.str("state", string(m.State))
	f.str("gw", m.GWID)
	f.int("gwStarted", m.GWStarted)
	f.str("clientReply", m.ClientReply)
	f.str("api", m.API)
	f.str("content", string(m.Content))
	f.strOmit("corr", m.LogCorr)
	f.key("sub")
	m.Submission.appendWire(w)
	f.uint("drive", uint64(m.Drive))
	f.strOmit("rc", m.RCID)
	f.intOmit("rcStarted", m.RCStarted)
	f.strOmit("by", m.By)
	f.close()
}

func (m *LogEntry) decodeWire(r *wireReader) error {
	return wireFields(r, m, "request log entry", func(k []byte) error {
		switch string(k) {
		case "v":
			return r.u8(&m.V)
		case "req":
			return r.string(&m.RequestID)
		case "clientReq":
			return r.string(&m.ClientRequestID)
		case "caller":
			return r.string(&m.Caller)
		case "state":
			v, err := r.str()
			m.State = LogState(v)
			return err
		case "gw":
			return r.string(&m.GWID)
		case "gwStarted":
			return r.i64(&m.GWStarted)
		case "clientReply":
			return r.string(&m.ClientReply)
		case "api":
			return r.string(&m.API)
		case "content":
			return r.content(&m.Content)
		case "corr":
			return r.string(&m.LogCorr)
		case "chunks":
			return r.boolean(&m.Chunks)
		case "sub":
			return m.Submission.decodeWire(r)
		case "drive":
			return r.u32(&m.Drive)
		case "rc":
			return r.string(&m.RCID)
		case "rcStarted":
			return r.i64(&m.RCStarted)
		case "by":
			return r.string(&m.By)
		}
		return r.skip()
	})
}
