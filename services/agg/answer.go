package agg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/subjects"
	"github.com/vmihailenco/msgpack/v5"
)

// answer builds the answer of one request and sends it, then tells the RC.
func (a *Agg) answer(j job) {
	if j.fold != nil {
		defer j.fold.close() // answered without it (an error): its folds are let go
	}
	e := &j.exp
	content := e.Content
	if content == "" {
		content = messages.ContentMsgpack
	}
	if streams(j) {
		log := a.log.With().Str("request_id", e.RequestID).Str("api", e.API).Str("log_corr", e.LogCorr).Logger()
		st, ok := a.answerStream(j, content, log) // stream.go
		if ok {
			return
		}
		// Nothing went out: the error is answered whole.
		j.partials = nil
		j.exp.Stream = false
		a.answerWhole(j, content, st)
		return
	}
	a.answerWhole(j, content, messages.StatusOK)
}

// answerLog adds the request's fields to ev, a line about e's answer: on
// the event, not through a logger built for each answer (zerolog's With
// allocates its context every time; a small answer writes one line).
func answerLog(ev *zerolog.Event, e *messages.AggExpectation) *zerolog.Event {
	return ev.Str("request_id", e.RequestID).Str("api", e.API).Str("log_corr", e.LogCorr)
}

// answerWhole answers j in one message (in chunks above the max payload), or
// with failed when it is not OK.
func (a *Agg) answerWhole(j job, content messages.Content, failed messages.Status) {
	e := &j.exp
	start := time.Now()
	st, payload := failed, []byte(nil)
	if st.IsOK() {
		st, payload = a.result(j, content)
	}
	// The payload is the answer's own (result's encoders'): once it is sent
	// or dropped, nothing reads it, and the next large answer is written
	// into it.
	defer messages.ReleaseBuffer(payload)
	a.metrics.merged(e.API, start)
	data, st, err := a.encode(e, content, st, payload)
	if err != nil {
		answerLog(a.log.Error(), e).Err(err).Msg("answer not encoded")
		return
	}
	if time.Now().UnixNano() >= e.Deadline {
		// Seed: the RC answers TIMEOUT at the deadline; a late answer would be a second one.
		a.stats.expired.Add(1)
		answerLog(a.log.Warn(), e).Msg("answer ready after the deadline: not sent")
		a.tellTimedOut(e, "answer ready after the deadline", time.Now()) // timeout.go
		return
	}
	if !st.IsOK() {
		a.stats.errors.Add(1)
	}
	h := nats.Header{}
	messages.Routing{RequestID: e.RequestID, API: e.API, AggID: a.cfg.ID, LogCorr: e.LogCorr, Content: content}.Write(h)
	st.Write(h)
	switch {
	case j.refused:
		messages.SetString(h, messages.HdrLimit, limits.AggHeldBytes)
		messages.SetInt(h, messages.HdrRetryAfter, int64(j.retryAfter))
	case j.tooLarge:
		// Named, but no Retry-After: coming back cannot make the request smaller.
		messages.SetString(h, messages.HdrLimit, limits.AggRequestBytes)
	}
	size := data.Len()
	if max := a.cfg.NC.MaxPayload(); int64(size+messages.HeaderSize(h)) > max {
		// Room is left in every chunk for the ids the GW puts in as it
		// passes them on; chunks are cut at defaults.AggAnswerChunk.
		n, err := messages.SendChunkedBody(a.cfg.NC, e.ReplyTo, h, data, min(int(max)-messages.RelayRoom, defaults.AggAnswerChunk))
		if err != nil {
			answerLog(a.log.Error(), e).Err(err).Int("chunks_sent", n).Msg("answer not sent")
			return
		}
	} else if err := a.cfg.NC.PublishMsg(&nats.Msg{Subject: e.ReplyTo, Header: h, Data: data.Join()}); err != nil {
		answerLog(a.log.Error(), e).Err(err).Msg("answer not sent")
		return
	}
	a.metrics.answered(st)
	answerLog(a.log.Info(), e).Stringer("rc", st.RC).Int("bytes", size).Int("partials", len(j.partials)).Dur("elapsed", time.Since(start)).Msg("answered")
	a.tellDone(e, st)
}

// encode wraps the answer in a response envelope; an answer above MaxAnswerBytes becomes
// a TOO_LARGE error, so nothing is ever cut silently. The payload is the Agg's
// own encoders' (result): it is wrapped, not validated nor copied.
func (a *Agg) encode(e *messages.AggExpectation, content messages.Content, st messages.Status, payload []byte) (messages.Body, messages.Status, error) {
	resp := func(st messages.Status, payload []byte) (messages.Body, error) {
		return messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: answerID(e),
			API: e.API, LogCorr: e.LogCorr, Status: st}, Payload: payload, Content: content}.EncodeOwn()
	}
	data, err := resp(st, payload)
	if err != nil {
		st = messages.Errorf(messages.CodeInternal, messages.CodeErr, "Agg could not encode the answer: %v", err)
		data, err = resp(st, nil)
	} else if size := data.Len(); int64(size) > a.cfg.MaxAnswerBytes {
		a.stats.tooLarge.Add(1)
		st = messages.Errorf(messages.CodeTooLarge, messages.CodeErr,
			"answer of %d bytes is above the Agg's limit of %d bytes for a whole answer: read it as a stream (request header %s: 1; getData, sql), "+
				"which has no size limit, or page it (a limit and a narrower time range; fewer columns, a filter)", size, a.cfg.MaxAnswerBytes, messages.HdrAcceptStream)
		data, err = resp(st, nil)
	}
	return data, st, err
}

// answerID is the request id an answer's envelope names: the caller's, when
// the GW said it (the GW then has nothing to rewrite in it).
func answerID(e *messages.AggExpectation) string {
	if e.AnswerID != "" {
		return e.AnswerID
	}
	return e.RequestID
}

// result is the status and payload (in content) of a complete request.
func (a *Agg) result(j job, content messages.Content) (messages.Status, []byte) {
	if j.tooLarge {
		a.stats.tooLarge.Add(1)
		return messages.Errorf(messages.CodeTooLarge, messages.CodeErr,
			"partial results of the request are above the Agg's limit %s=%d bytes (%s): narrow the request (columns, filter, limit), "+
				"or read rows without sortCols as a stream (request header %s: 1; getData, sql), merged window by window",
			limits.AggRequestBytes, a.cfg.MaxRequestBytes, EnvMaxRequestBytes, messages.HdrAcceptStream), nil
	}
	if j.refused {
		a.stats.refused.Add(1)
		return messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
			"Request refused: Agg %s holds too many partial results, over its limit %s=%d bytes (%s)",
			a.cfg.ID, limits.AggHeldBytes, a.cfg.MaxHeldBytes, EnvMaxHeldBytes), nil
	}
	if j.failed != nil {
		return *j.failed, nil
	}
	// Seed: a failed portion fails the request with the DAP's rc/ac/ai.
	for _, p := range j.partials {
		if !p.Status.IsOK() {
			return p.Status, nil
		}
	}
	switch j.exp.API {
	case subjects.APIGetData, subjects.APISQL: // sql runs as planned getData (the RC planned it)
		return getData(j, content)
	case subjects.APIPing:
		return ping(j, content)
	}
	return messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "the Agg cannot merge API %q", j.exp.API), nil
}

// parallelDecodeBytes: a partial at least this large is decoded beside the
// others; a small one costs less than a goroutine.
const parallelDecodeBytes = 64 << 10

func getData(j job, content messages.Content) (messages.Status, []byte) {
	size := partialBytes(j) // the merged table's is about the same (rows)
	m, parts, st := merger(j)
	if !st.IsOK() {
		return st, nil
	}
	var t messages.Table
	var err error
	var b []byte
	if parts == nil {
		t, err = m.Result()
		if m.Aggregated() {
			// Groups: the partials' bytes are about N times the answer's.
			size = t.SizeHint()
		}
	} else {
		// Portions in windows: a k-way merge of their rows in time order.
		// For JSON, into one table, each portion fetching its windows in
		// turn; for msgpack, written column by column from the merge's order
		// without building the table, the order found in two halves side by
		// side (merge.EncodeRuns).
		if content == messages.ContentJSON {
			var w *merge.Windows
			if w, err = m.Stream(merge.SourceFetches(parts.runs, false)); err == nil {
				t, err = w.Rest(parts.rows)
			}
		} else {
			b, err = m.EncodeRuns(parts.runs, parts.rows, size, runtime.GOMAXPROCS(0))
		}
	}
	if st := mergeStatus(err); !st.IsOK() {
		return st, nil
	}
	switch {
	case b != nil:
	case content == messages.ContentJSON:
		b, err = messages.EncodeTableJSON(t, runtime.GOMAXPROCS(0))
	default:
		b, err = messages.EncodeTableMsgpack(t, runtime.GOMAXPROCS(0), size)
	}
	if err != nil {
		return messages.Errorf(messages.CodeInternal, messages.CodeErr, "encode the merged table: %v", err), nil
	}
	if parts != nil {
		parts.release() // b is the answer's own bytes: nothing reads the windows now
	}
	return messages.StatusOK, b
}

// partialBytes is the size of the partials' payloads (the merged table's is about the same).
func partialBytes(j job) int {
	size := 0
	for _, p := range j.partials {
		size += len(p.Payload)
	}
	return size
}

// mergeStatus is the answer's status after merging (Result or Windows).
func mergeStatus(err error) messages.Status {
	switch {
	case err == nil:
		return messages.StatusOK
	case errors.Is(err, merge.ErrSortColumn) || errors.Is(err, merge.ErrAggType):
		return messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "%v", err)
	}
	return messages.Errorf(messages.CodeErr, messages.CodeErr, "merge: %v", err)
}

// runParts are the decoded windows of a request's portions, portion by
// portion, for merge.Stream and Merger.EncodeRuns.
type runParts struct {
	runs [][]merge.Partial
	rows int
}

// release gives the decoded windows' storage to the next answer's decoding,
// once the answer is written.
func (p *runParts) release() {
	for _, run := range p.runs {
		for i := range run {
			run[i].Release()
		}
	}
}

// merger decodes the partials of a getData request and adds them to a
// Merger. When a portion's partial came in windows (j.runs), the decoded
// windows are returned by portion instead, for Merger.Stream (or
// EncodeRuns), and nothing is added.
func merger(j job) (*merge.Merger, *runParts, messages.Status) {
	// Decoded once per request: by the fold or streamsLive if either ran.
	args, err := j.args.of(&j.exp)
	if err != nil {
		return nil, nil, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "getData arguments: %v", err)
	}
	if j.fold != nil && j.runs == nil {
		// Aggregates: folded as they came (fold.go); the answer folds the
		// rest. Anything amiss: merged below as before, for its status.
		if m, ok := j.fold.finish(j.partials); ok {
			for i := range j.partials {
				j.partials[i].Payload = nil
			}
			return m, nil, messages.StatusOK
		}
	}
	parts, errs := decodePartials(j.partials, j.decoded)
	for i, p := range j.partials {
		if errs != nil && errs[i] != nil {
			return nil, nil, messages.Errorf(messages.CodeErr, messages.CodeErr, "partial result of portion %s from DAP %s: %v", p.Ref(), p.DAPID, errs[i])
		}
	}
	// The decoded partials do not alias their bytes: let the bytes go while
	// the answer is merged and sent.
	for i := range j.partials {
		j.partials[i].Payload = nil
	}
	m := merge.NewMerger(args)
	if j.runs != nil {
		rp := &runParts{}
		for _, n := range j.runs {
			rp.runs = append(rp.runs, parts[:n:n])
			for _, p := range parts[:n] {
				rp.rows += p.Rows.NumRows()
			}
			parts = parts[n:]
		}
		return m, rp, messages.StatusOK
	}
	for i := range parts {
		if err := m.AddShared(&parts[i]); err != nil {
			return nil, nil, mergeStatus(fmt.Errorf("partial %d: %w", i, err))
		}
	}
	return m, nil, messages.StatusOK
}

// decodePartials decodes ps, those in decoded (by index; nil entries, or
// nil: none) as they came (early.go). Large partials are decoded side by
// side, on as many cores as there are: the answer waits for the slowest,
// not for the sum. errs is nil when every decode succeeded.
func decodePartials(ps []messages.PartialResult, decoded []*decoding) ([]merge.Partial, []error) {
	for _, p := range ps {
		if len(p.Payload) >= parallelDecodeBytes {
			return decodePartialsBeside(ps, decoded)
		}
	}
	// All small (a small request's one partial): decoded in turn, with no
	// semaphore, wait group or error slice (made at the first error).
	parts := make([]merge.Partial, len(ps))
	var errs []error
	for i, p := range ps {
		var err error
		if i < len(decoded) && decoded[i] != nil {
			parts[i], err = decoded[i].wait() // decoding since it came (early.go)
		} else {
			parts[i], err = merge.DecodePartial(p.Payload)
		}
		if err != nil {
			if errs == nil {
				errs = make([]error, len(ps))
			}
			errs[i] = err
		}
	}
	return parts, errs
}

// decodePartialsBeside is decodePartials when a partial is large: those
// are decoded side by side, on as many cores as there are.
func decodePartialsBeside(ps []messages.PartialResult, decoded []*decoding) ([]merge.Partial, []error) {
	parts := make([]merge.Partial, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, p := range ps {
		if i < len(decoded) && decoded[i] != nil {
			continue // decoding since it came (early.go)
		}
		if len(p.Payload) < parallelDecodeBytes {
			parts[i], errs[i] = merge.DecodePartial(p.Payload)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			parts[i], errs[i] = merge.DecodePartial(p.Payload)
		})
	}
	wg.Wait()
	for i, d := range decoded {
		if d != nil {
			parts[i], errs[i] = d.wait()
		}
	}
	return parts, errs
}

// ping answers one boolean per DAP reached: true when every portion it ran said true.
func ping(j job, content messages.Content) (messages.Status, []byte) {
	reached := map[string]bool{}
	for _, p := range j.partials {
		var ok bool
		if err := messages.Decode(p.Payload, &ok); err != nil {
			ok = false
		}
		if prev, seen := reached[p.DAPID]; seen {
			ok = ok && prev
		}
		reached[p.DAPID] = ok
	}
	var (
		b   []byte
		err error
	)
	if content == messages.ContentJSON {
		b, err = json.Marshal(reached) // keys sorted
	} else {
		b, err = encodeSorted(reached)
	}
	if err != nil {
		return messages.Errorf(messages.CodeInternal, messages.CodeErr, "encode ping answer: %v", err), nil
	}
	return messages.StatusOK, b
}

// encodeSorted encodes a map with its keys sorted, so equal answers are equal bytes.
func encodeSorted(m map[string]bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("msgpack: %w", err)
	}
	return buf.Bytes(), nil
}
