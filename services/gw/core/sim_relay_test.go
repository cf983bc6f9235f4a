package core

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// The simulation's answers passed on as they come (relay.go): callers that
// reassemble chunks (Sg-Accept-Chunks) or read streams (Sg-Accept-Stream),
// Aggs that send chunked answers and answer streams with faults (chunks out
// of order, repeated, lost, corrupt, forged, of the wrong size, too large,
// chunk 0 too large to pass on; frames repeated, lost, malformed, of another
// stream, in bursts past what may be held; transfers that stop short or end
// with the Agg's error frame), and a shell whose publish to the caller fails
// now and then (RelayFailed). The caller's view of every transfer is checked
// message by message, and what the GWs hold after every step.

// Callers' modes: what a request's caller accepts (bits; a caller may say both).
const (
	modeWhole  = 0 // one whole answer
	modeChunks = 1 // Sg-Accept-Chunks: a chunked answer passed on as it comes
	modeStream = 2 // Sg-Accept-Stream: an answer stream, frame by frame
)

const (
	simMaxPayload = 8 << 10
	simMaxAnswer  = 48 << 10
)

// transfer is what a caller saw of an answer passed on to it as it comes.
type transfer struct {
	gw      string
	inc     int64
	chunked bool
	stream  string
	next    int // the next chunk index (frame seq) the caller expects
	count   int // a chunked transfer's chunks
	data    []byte
	ra      *messages.Reassembler // what the caller makes of a chunked one
	began   int64
	lost    bool // a message of it could not be published: only an error end may follow
	ended   bool
	broken  bool // it ended with an error end (the GW's, or the Agg's error frame)
	endLost bool // its error end could not be published: the caller's timeout fires
	gone    bool // its GW crashed with it under way
}

// aggAnswer sends the answer of a drive of rq the way its Agg would, with
// faults; false: the RC's whole answer goes instead (submit).
func (s *sim) aggAnswer(rq *simReq, reply, drive string, at int64, alive func() bool) bool {
	x := s.rng.IntN(100)
	mode := rq.mode
	if mode == modeChunks|modeStream {
		mode = []int{modeChunks, modeStream}[s.rng.IntN(2)]
	}
	switch mode {
	case modeWhole:
		switch {
		case x < 88:
			return false
		case x < 90: // frames for a caller that does not read streams: dropped
			s.sendStream(rq, reply, drive, at, alive)
			return true
		}
		s.sendChunked(rq, reply, drive, rq.clientID, simMaxPayload-messages.RelayRoom, at, alive)
	case modeChunks:
		switch {
		case x < 25:
			return false
		case x < 35: // names the drive id (an older Agg's): reassembled first
			s.sendChunked(rq, reply, drive, drive, simMaxPayload-messages.RelayRoom, at, alive)
		case x < 42: // chunk 0 too large to pass on with the caller's ids: reassembled first
			s.sendChunked(rq, reply, drive, rq.clientID, simMaxPayload, at, alive)
		default:
			s.sendChunked(rq, reply, drive, rq.clientID, simMaxPayload-messages.RelayRoom, at, alive)
		}
	case modeStream:
		if x < 20 {
			return false
		}
		s.sendStream(rq, reply, drive, at, alive)
	}
	return true
}

// answerBody is an Agg's answer envelope naming answerID, of about n bytes.
func (s *sim) answerBody(drive, answerID string, n int) []byte {
	payload := make([]byte, n)
	b := byte(s.rng.IntN(256))
	for i := range payload {
		payload[i] = b + byte(i*7)
	}
	copy(payload, drive)
	payload, _ = messages.EncodeSized(payload, 0)
	body, err := messages.Response{Header: messages.ResponseHeader{RequestID: answerID, API: subjects.APIGetData},
		Payload: payload, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		panic(err)
	}
	return body
}

// sendChunked schedules a chunked answer in chunks of at most size bytes.
func (s *sim) sendChunked(rq *simReq, reply, drive, answerID string, size int, at int64, alive func() bool) {
	n := 1 + s.rng.IntN(40_000)
	if s.rng.IntN(20) == 0 {
		n = simMaxAnswer + s.rng.IntN(8<<10) // above MaxAnswerBytes: refused
	}
	body := s.answerBody(drive, answerID, n)
	h := nats.Header{}
	messages.Routing{RequestID: drive, API: subjects.APIGetData}.Write(h)
	messages.StatusOK.Write(h)
	msgs, err := messages.SplitChunksBody(reply, h, messages.Body{body}, size)
	if err != nil {
		panic(err)
	}
	rq.bodies = append(rq.bodies, body)
	s.bodies[msgs[0].Header.Get(messages.HdrChunkStream)] = body
	out := make([]AnswerChunk, len(msgs))
	for i, m := range msgs {
		out[i] = AnswerChunk{Header: m.Header, Data: m.Data}
	}
	s.totals.AggTransfers++
	// An Agg that began sending a chunked answer sends it through (its RC
	// going does not stop it; a cancel does): the GW may have driven the
	// request again meanwhile, and the first answer of any drive is its.
	out = s.spoil(out, true)
	sent := &[2]int{0, len(out)}
	if rq.sent == nil {
		rq.sent = map[string]*[2]int{}
	}
	rq.sent[msgs[0].Header.Get(messages.HdrChunkStream)] = sent
	began := false
	goesOn := func() bool {
		if began {
			began = !s.cancels[drive]
		} else {
			began = alive()
		}
		if began {
			sent[0]++
		}
		return began
	}
	s.sendParts(out, reply, at, goesOn, s.breakEarlier(rq, drive, true))
}

// breakEarlier is an edit of the messages of a transfer of drive of rq as
// they are sent (sendParts): one transfer in three breaks at its first
// message sent once a later drive of rq was submitted (by any GW), where a
// GW holds the request driven again, the current drive may still answer,
// and the earlier drive's break must not be answered (answered checks).
// A chunked transfer gets a chunk of another shape, a corrupt chunk (its
// checksum fails at the last), or its Agg's chunk end, after which it
// sends nothing; a stream's frame 0 does not read (the rest follow). Its
// draws are its own (s.brk): the rest of a seed runs as without them.
func (s *sim) breakEarlier(rq *simReq, drive string, chunked bool) func(AnswerChunk) (AnswerChunk, bool) {
	n, ok := driveOf(rq.id, drive)
	if !ok || s.brk.IntN(3) != 0 {
		return nil
	}
	broke, ended := false, false
	return func(m AnswerChunk) (AnswerChunk, bool) {
		switch {
		case ended:
			return m, false
		case broke || n >= rq.lastDrive || !chunked && m.Header.Get(messages.HdrStreamSeq) != "0":
			return m, true
		}
		broke = true
		s.totals.EarlierBreaks++
		h := maps.Clone(m.Header)
		switch x := s.brk.IntN(3); {
		case !chunked:
			h.Set(messages.HdrStreamSeq, "x")
		case x == 0:
			ended = true
			h = nats.Header{}
			messages.Routing{RequestID: drive, API: subjects.APIGetData}.Write(h)
			h.Set(messages.HdrChunkStream, m.Header.Get(messages.HdrChunkStream))
			messages.Status{RC: messages.CodeErr, AC: messages.CodeErr, AI: "the Agg failed"}.Write(h)
			return AnswerChunk{Header: h}, true
		case x == 1:
			h.Set(messages.HdrChunkTotal, strconv.Itoa(1+s.brk.IntN(simMaxAnswer)))
		default:
			if len(m.Data) > 0 {
				d := bytes.Clone(m.Data)
				d[s.brk.IntN(len(d))] ^= 0x20
				m.Data = d
			}
		}
		m.Header = h
		return m, true
	}
}

// redriven notes the chunked transfers of rq's drives under way (sent in
// part) when its GW drives it again, and why it does; false: none is.
func (rq *simReq) redriven(why string) bool {
	under := false
	for id, n := range rq.sent {
		if n[0] > 0 && n[0] < n[1] {
			under = true
			if rq.inFlight == nil {
				rq.inFlight = map[string]string{}
			}
			if rq.inFlight[id] == "" {
				rq.inFlight[id] = why
			}
		}
	}
	return under
}

// simAgg is the Agg id in the sim's frames.
const simAgg = "agg-sim"

// pacedStream is an answer stream of an Agg the GW paces: it sent its
// first messages.StreamStartFrames frames, and sends the rest once a
// StartStream names it.
type pacedStream struct {
	rest      []AnswerChunk
	reply     string
	alive     func() bool
	signalled bool // a StartStream named it (it may have been lost)
	started   bool // a StartStream reached it: the rest went
}

// sendStream schedules an answer stream of 1 to 40 frames; most Aggs wait
// for the GW's StartStream after messages.StreamStartFrames of them (an
// older one, or one the GW did not say it paces, does not).
func (s *sim) sendStream(rq *simReq, reply, drive string, at int64, alive func() bool) {
	s.nextStream++
	id := "st" + strconv.Itoa(s.nextStream)
	n := 1 + s.rng.IntN(40)
	out := make([]AnswerChunk, n)
	var body []byte
	for i := range n {
		h := nats.Header{}
		h.Set(messages.HdrRequestID, drive)
		h.Set(messages.HdrAggID, simAgg)
		messages.SetStreamFrame(h, id, i, i == n-1)
		out[i] = AnswerChunk{Header: h, Data: fmt.Appendf(nil, "%s/%d;", drive, i)}
		body = append(body, out[i].Data...)
	}
	s.bodies[id] = body
	s.totals.AggTransfers++
	out = s.spoil(out, false)
	if k := len(out); k > 1 && s.rng.IntN(15) == 0 {
		// The Agg fails after frame k-1: its own error frame ends the stream.
		k = 1 + s.rng.IntN(k-1)
		h := nats.Header{}
		h.Set(messages.HdrRequestID, drive)
		h.Set(messages.HdrAggID, simAgg)
		messages.SetStreamFrame(h, id, k, true)
		messages.Status{RC: messages.CodeErr, AC: messages.CodeErr, AI: "the Agg failed"}.Write(h)
		out = append(out[:k:k], AnswerChunk{Header: h})
	}
	if k := messages.StreamStartFrames; len(out) > k && s.rng.IntN(4) != 0 {
		s.paced[id] = &pacedStream{rest: out[k:], reply: reply, alive: alive}
		out = out[:k]
	}
	s.sendParts(out, reply, at, alive, s.breakEarlier(rq, drive, false))
}

// startSignal checks a StartStream: once per stream, in the step of the
// stream's Answer (frame 0, so after `answered` landed), after it (before:
// the commands of the step before it), addressed to the Agg and drive of
// frame 0 (startUnread: a first frame that did not read); a paced Agg then
// sends the rest of its stream.
//
// A StartStream sent again (Again: the first may have been lost) comes
// StartResend or more after the one before, for a stream that had one; the
// sim loses one first StartStream in eight of a paced stream, and the one
// sent again starts it.
func (s *sim) startSignal(g *simGW, inc int64, c StartStream, before []Command) error {
	last, seen := s.startSeen[c.StreamID]
	if c.Again {
		if !seen {
			return fmt.Errorf("request %s: StartStream for stream %s sent again, never sent", c.Info.ID, c.StreamID)
		}
		if s.now-last < StartResend {
			return fmt.Errorf("request %s: StartStream for stream %s sent again %v after the last", c.Info.ID, c.StreamID, time.Duration(s.now-last))
		}
		s.startSeen[c.StreamID] = s.now
		s.totals.StreamStartsAgain++
		if p := s.paced[c.StreamID]; p != nil && !p.started {
			s.totals.PacedResent++
			s.startPaced(p)
		}
		return nil
	}
	if seen {
		return fmt.Errorf("request %s: a second StartStream for stream %s", c.Info.ID, c.StreamID)
	}
	s.startSeen[c.StreamID] = s.now
	i := slices.IndexFunc(before, func(cmd Command) bool {
		a, ok := cmd.(Answer)
		return ok && a.Info.ID == c.Info.ID && a.Header.Get(messages.HdrStreamID) == c.StreamID
	})
	if i < 0 {
		return s.startUnread(c, before)
	}
	a := before[i].(Answer)
	if c.AggID != simAgg || c.DriveID != a.Header.Get(messages.HdrRequestID) {
		return fmt.Errorf("request %s: StartStream to Agg %q for drive %q, frame 0 from %q for %q", c.Info.ID, c.AggID, c.DriveID,
			a.Header.Get(messages.HdrAggID), a.Header.Get(messages.HdrRequestID))
	}
	if rq := s.reqs[c.Info.ID]; rq == nil || rq.tr == nil || rq.tr.stream != c.StreamID || rq.tr.gw != g.id || rq.tr.inc != inc {
		return fmt.Errorf("request %s: StartStream for stream %s, which its caller does not read from %s", c.Info.ID, c.StreamID, g.id)
	}
	s.totals.StreamStarts++
	if p := s.paced[c.StreamID]; p != nil {
		p.signalled = true
		if s.rng.IntN(8) == 0 {
			s.totals.PacedLost++
			s.logfNow("StartStream for %s lost", c.StreamID)
			return nil
		}
		s.startPaced(p)
	}
	return nil
}

// startUnread checks the StartStream of a stream whose first frame did not
// read: it comes after the request's Answer in the step, the GW's own error
// naming that frame (relay.go unreadableFrame), addressed to the Agg and one
// of the request's drives, for a stream its caller reads nothing of; a paced
// Agg then sends the rest (dropped at the GW).
func (s *sim) startUnread(c StartStream, before []Command) error {
	i := slices.IndexFunc(before, func(cmd Command) bool {
		a, ok := cmd.(Answer)
		return ok && a.Info.ID == c.Info.ID && !a.Forward && strings.Contains(a.Status.AI, "at its first frame")
	})
	if i < 0 {
		return fmt.Errorf("request %s: StartStream for stream %s without its Answer before it in the step", c.Info.ID, c.StreamID)
	}
	if c.AggID != simAgg || !ownDrive(c.Info.ID, c.DriveID) {
		return fmt.Errorf("request %s: StartStream for an unread stream to Agg %q for drive %q", c.Info.ID, c.AggID, c.DriveID)
	}
	if cur := messages.DriveID(c.Info.ID, c.Info.Drive); c.DriveID != cur {
		// An earlier drive's stream broke at its first frame: dropped, the
		// current drive may still answer.
		return fmt.Errorf("request %s answered the GW's error for drive %s's first frame, its current drive %s", c.Info.ID, c.DriveID, cur)
	}
	if rq := s.reqs[c.Info.ID]; rq != nil && rq.tr != nil && rq.tr.stream == c.StreamID {
		return fmt.Errorf("request %s: stream %s relayed to its caller and answered an error for its first frame", c.Info.ID, c.StreamID)
	}
	s.totals.StreamStarts++
	if p := s.paced[c.StreamID]; p != nil {
		p.signalled = true
		s.startPaced(p)
	}
	return nil
}

// startPaced: p's Agg has its StartStream and sends the rest.
func (s *sim) startPaced(p *pacedStream) {
	s.totals.PacedStarted++
	p.started = true
	s.sendParts(p.rest, p.reply, s.now+int64(1+s.rng.IntN(s.maxGap))*ms, p.alive, nil)
}

// checkStarts: the Answer of a paced stream whose Agg waits (its last
// frame not sent) comes with its StartStream, or the Agg would wait until
// the deadline.
func (s *sim) checkStarts(cmds []Command) error {
	for _, cmd := range cmds {
		a, ok := cmd.(Answer)
		if !ok || !messages.IsStreamFrame(a.Header) {
			continue
		}
		id := a.Header.Get(messages.HdrStreamID)
		if p := s.paced[id]; p != nil && !p.signalled {
			return fmt.Errorf("request %s: stream %s answered without a StartStream, its Agg waits", a.Info.ID, id)
		}
	}
	return nil
}

// spoil: now and then one fault in a transfer (chunked: chunks may be
// repeated or out of order, the relay must cope; anything else must keep it
// from completing).
func (s *sim) spoil(out []AnswerChunk, chunked bool) []AnswerChunk {
	if s.rng.Float64() >= s.pSpoil || len(out) == 0 {
		return out
	}
	s.totals.AggFaults++
	i := s.rng.IntN(len(out))
	switch s.rng.IntN(7) {
	case 0: // repeated
		out = append(out[:i+1:i+1], out[i:]...)
	case 1: // out of order
		if i+1 < len(out) {
			out[i], out[i+1] = out[i+1], out[i]
		}
	case 2: // lost
		out = append(out[:i:i], out[i+1:]...)
	case 3: // stops short
		out = out[:i]
	case 4: // corrupt (a chunk's checksum fails at the last; frames carry none: NATS does not corrupt)
		if d := out[i].Data; chunked && len(d) > 0 {
			d = bytes.Clone(d)
			d[s.rng.IntN(len(d))] ^= 0x20
			out[i].Data = d
		}
	case 5: // a chunk of the wrong size; a frame whose sequence does not read
		if chunked {
			out[i].Data = append(bytes.Clone(out[i].Data), 'x')
		} else {
			h := maps.Clone(out[i].Header)
			h.Set(messages.HdrStreamSeq, []string{"-1", "x", "99999999999999999999"}[s.rng.IntN(3)])
			out[i].Header = h
		}
	case 6: // forged: a chunk of another shape, a frame of another stream
		h := maps.Clone(out[i].Header)
		if chunked {
			h.Set(messages.HdrChunkTotal, strconv.Itoa(int(s.rng.Int32N(1<<20))))
		} else if i > 0 { // a frame 0 of its own is another stream
			h.Set(messages.HdrStreamID, "forged")
		}
		out[i].Header = h
	}
	return out
}

// sendParts delivers the messages of one transfer from at on, a few ms
// apart or in a burst, while alive (the drive not cancelled, its RC up);
// edit, if not nil, changes each as it goes, or keeps it back (false).
func (s *sim) sendParts(out []AnswerChunk, reply string, at int64, alive func() bool, edit func(AnswerChunk) (AnswerChunk, bool)) {
	burst := s.rng.IntN(4) == 0
	when := at
	for _, m := range out {
		s.schedule(when-s.now, func() {
			if !alive() {
				return
			}
			if edit != nil {
				var send bool
				if m, send = edit(m); !send {
					return
				}
			}
			s.deliver(reply, m.Header, m.Data)
		})
		if !burst {
			when += int64(s.rng.IntN(s.maxGap)) * ms
		}
	}
}

// publishFails decides whether the shell's publish of cmd to the caller
// fails (an answer passed on as it comes only: a whole answer's failure is
// only logged), and what the shell reports to the core as services/gw's
// shell does: nothing for its own error end (At 0), which is not sent again.
func (s *sim) publishFails(cmd Command) (RelayFailed, bool) {
	if s.pRelayFail == 0 || s.rng.Float64() >= s.pRelayFail {
		return RelayFailed{}, false
	}
	err := errors.New("simulated publish failure")
	switch c := cmd.(type) {
	case Answer:
		if !c.Relayed {
			return RelayFailed{}, false
		}
		// The HTTP shell may answer an error status instead.
		return RelayFailed{At: s.now, Info: c.Info, Header: c.Header, Err: err, Answered: s.rng.IntN(3) == 0}, true
	case Relay:
		if !c.Status.IsOK() {
			return RelayFailed{}, true
		}
		return RelayFailed{At: s.now, Info: c.Info, Header: c.Header, Err: err}, true
	}
	return RelayFailed{}, false
}

// firstMessage checks what the caller gets of a forwarded Answer and starts
// its transfer when one begins. lost: the publish failed (fail says how).
func (s *sim) firstMessage(g *simGW, inc int64, rq *simReq, a Answer, fail RelayFailed, lost bool) error {
	frame := messages.IsStreamFrame(a.Header)
	if a.Relayed && !a.Chunk && !frame || a.Relayed && a.Err != nil {
		return fmt.Errorf("request %s: a whole answer marked relayed (err %v)", rq.id, a.Err)
	}
	switch {
	case a.Err != nil:
		return nil // the shell answers the error
	case a.Chunk:
		if rq.mode&modeChunks == 0 || !a.Relayed {
			return fmt.Errorf("request %s (mode %d): chunk 0 passed on (relayed %t)", rq.id, rq.mode, a.Relayed)
		}
		count, err := strconv.Atoi(a.Header.Get(messages.HdrChunkCount))
		if err != nil || a.Header.Get(messages.HdrChunkIndex) != "0" || count < 2 {
			return fmt.Errorf("request %s: chunk 0 passed on with index %q count %q", rq.id,
				a.Header.Get(messages.HdrChunkIndex), a.Header.Get(messages.HdrChunkCount))
		}
		rq.tr = &transfer{gw: g.id, inc: inc, chunked: true, stream: a.Header.Get(messages.HdrChunkStream), count: count,
			ra: messages.NewReassembler(simMaxAnswer), began: s.now}
	case frame:
		f, err := messages.ReadStreamFrame(a.Header)
		if rq.mode&modeStream == 0 || err != nil || f.Seq != 0 || a.Relayed == f.End {
			return fmt.Errorf("request %s (mode %d): frame %+v (%v) answered, relayed %t", rq.id, rq.mode, f, err, a.Relayed)
		}
		rq.tr = &transfer{gw: g.id, inc: inc, stream: f.ID, began: s.now}
	case messages.IsChunkEnd(a.Header):
		return nil // its Agg's chunk end (breakEarlier), the current drive's: answered as it came
	case a.Header.Get(messages.HdrChunkIndex) != "" || a.Header.Get(messages.HdrChunkCount) != "":
		return fmt.Errorf("request %s: a chunk answered as a whole answer", rq.id)
	default:
		if got := string(a.Data); got == rq.id || strings.HasPrefix(got, rq.id+messages.DriveSep) {
			return nil // the RC's whole answer
		}
		for _, b := range rq.bodies {
			if bytes.Equal(a.Data, b) {
				for id, why := range rq.inFlight {
					if bytes.Equal(s.bodies[id], b) {
						s.totals.EarlierDriveAnswers[why]++
						break
					}
				}
				return nil // a chunked answer reassembled
			}
		}
		return fmt.Errorf("request %s forwarded %d bytes that no drive of it answered", rq.id, len(a.Data))
	}
	if a.Relayed {
		s.totals.Transfers++
		if a.Chunk {
			s.totals.TransfersChunked++
		}
		if g.id != rq.gw || inc != rq.gwInc {
			s.totals.TransfersAdopted++
		}
	}
	if lost {
		rq.tr.lost = true
		if fail.Answered {
			rq.tr.ended, rq.tr.broken = true, true
		}
		return nil
	}
	return s.take(rq, a.Header, a.Data)
}

// relayed checks a Relay as its caller gets it (lost: its publish failed).
func (s *sim) relayed(g *simGW, inc int64, r Relay, lost bool) error {
	rq := s.reqs[r.Info.ID]
	if rq == nil {
		return fmt.Errorf("relay for a request never sent: %s", r.Info.ID)
	}
	tr := rq.tr
	switch {
	case tr == nil:
		return fmt.Errorf("request %s: a relay before its answer began", rq.id)
	case tr.gw != g.id || tr.inc != inc:
		return fmt.Errorf("request %s: %s/%d relays a transfer %s/%d began", rq.id, g.id, inc, tr.gw, tr.inc)
	case tr.ended:
		return fmt.Errorf("request %s: a relay after the end of its transfer", rq.id)
	case r.Info.Reply != rq.caller+"."+rq.id:
		return fmt.Errorf("request %s relayed to %q", rq.id, r.Info.Reply)
	}
	if !r.Status.IsOK() { // the GW's own error end
		if s.paced[tr.stream] != nil && strings.Contains(r.Status.AI, "held the stream past") {
			return fmt.Errorf("request %s: paced stream %s broke: %s", rq.id, tr.stream, r.Status.AI)
		}
		h := withStatus(r)
		if tr.chunked {
			if !messages.IsChunkEnd(h) || h.Get(messages.HdrChunkStream) != tr.stream {
				return fmt.Errorf("request %s: transfer %s ended with %v, not its chunk end", rq.id, tr.stream, h)
			}
		} else if f, err := messages.ReadStreamFrame(h); err != nil || f.ID != tr.stream || !f.End {
			return fmt.Errorf("request %s: stream %s ended with frame %+v (%v)", rq.id, tr.stream, f, err)
		}
		if !r.End || r.Data != nil {
			return fmt.Errorf("request %s: an error end with end %t and %d bytes", rq.id, r.End, len(r.Data))
		}
		if lost {
			tr.endLost = true
			return nil
		}
		tr.ended, tr.broken = true, true
		s.totals.TransfersBroken++
		return nil
	}
	if tr.lost {
		return fmt.Errorf("request %s: relayed on after a message of it could not be published", rq.id)
	}
	if lost {
		tr.lost = true
		if !tr.chunked {
			if st, err := messages.ReadStatus(r.Header); err == nil && !st.IsOK() {
				tr.endLost = true // the Agg's error frame: nothing more comes
			}
		}
		return nil
	}
	if err := s.take(rq, r.Header, r.Data); err != nil {
		return err
	}
	if r.End != tr.ended {
		return fmt.Errorf("request %s: relay end %t, the transfer's end %t", rq.id, r.End, tr.ended)
	}
	return nil
}

// take is the caller taking one message of its transfer, in order.
func (s *sim) take(rq *simReq, h nats.Header, data []byte) error {
	tr := rq.tr
	if tr.chunked {
		idx := h.Get(messages.HdrChunkIndex)
		if h.Get(messages.HdrChunkStream) != tr.stream || idx != strconv.Itoa(tr.next) {
			return fmt.Errorf("request %s: chunk %q of %q came, chunk %d of %q expected", rq.id, idx,
				h.Get(messages.HdrChunkStream), tr.next, tr.stream)
		}
		tr.next++
		done, err := tr.ra.Add(h, data)
		if err != nil {
			return fmt.Errorf("request %s: the caller's reassembly fails at chunk %d, which the GW passed on: %w", rq.id, tr.next-1, err)
		}
		if done != (tr.next == tr.count) {
			return fmt.Errorf("request %s: chunk %d of %d passed on, reassembled %t", rq.id, tr.next-1, tr.count, done)
		}
		if done {
			if p, _ := tr.ra.Payload(); !bytes.Equal(p, s.bodies[tr.stream]) {
				return fmt.Errorf("request %s: the caller reassembled %d bytes that are not the Agg's answer", rq.id, len(p))
			}
			tr.ended = true
			s.totals.TransfersWhole++
		}
		return nil
	}
	f, err := messages.ReadStreamFrame(h)
	if err != nil || f.ID != tr.stream || f.Seq != tr.next {
		return fmt.Errorf("request %s: frame %+v (%v) came, frame %d of %q expected", rq.id, f, err, tr.next, tr.stream)
	}
	tr.next++
	if st, err := messages.ReadStatus(h); err == nil && !st.IsOK() {
		if !f.End {
			return fmt.Errorf("request %s: an error frame that does not end its stream", rq.id)
		}
		tr.ended, tr.broken = true, true // the Agg's own error end
		s.totals.TransfersBroken++
		return nil
	}
	tr.data = append(tr.data, data...)
	if f.End {
		if !bytes.Equal(tr.data, s.bodies[tr.stream]) {
			return fmt.Errorf("request %s: stream %s complete with %q, the Agg sent %q", rq.id, tr.stream, tr.data, s.bodies[tr.stream])
		}
		tr.ended = true
		if tr.next > 1 {
			s.totals.TransfersWhole++
		}
	}
	return nil
}

// checkHeld: what each GW holds for its requests stays within its bounds,
// and a request is never both held and relayed.
func (s *sim) checkHeld() error {
	for _, g := range s.gws {
		if g.c == nil {
			continue
		}
		if g.aborted && g.c.Relaying() > 0 {
			return fmt.Errorf("%s relays %d answers after Abort", g.id, g.c.Relaying())
		}
		for id, r := range g.c.reqs {
			held := 0
			if r.chunks != nil {
				held = len(r.held.data)
				for _, e := range r.chunks.held {
					held += len(e.Data)
				}
			}
			switch {
			case held > simMaxAnswer:
				return fmt.Errorf("%s holds %d bytes of chunks of %s, above MaxAnswerBytes", g.id, held, id)
			case r.chunks != nil && len(r.chunks.held) > maxHeldChunks:
				return fmt.Errorf("%s holds %d chunks of %s", g.id, len(r.chunks.held), id)
			case r.stream != nil && len(r.stream.held) > MaxHeldFrames:
				return fmt.Errorf("%s holds %d frames of %s", g.id, len(r.stream.held), id)
			case len(r.streams) > maxStreamsPerRequest:
				return fmt.Errorf("%s reassembles %d transfers of %s", g.id, len(r.streams), id)
			case g.c.relays[id] != nil:
				return fmt.Errorf("%s both holds and relays %s", g.id, id)
			}
		}
		for id, rl := range g.c.relays {
			if rq := s.reqs[id]; rq == nil || rq.tr == nil || rq.tr.ended || rq.tr.gw != g.id {
				return fmt.Errorf("%s relays %s, whose caller has no transfer open from it", g.id, id)
			} else if !g.stalled && s.now > max(rl.deadline, rq.tr.began) { // NextDeadline has the core stepped at the deadline (once it runs)
				return fmt.Errorf("%s still relays %s %s after its deadline", g.id, id, time.Duration(s.now-rl.deadline))
			}
		}
	}
	return nil
}

// heldOf checks what c counts of answers' bytes held against what its
// requests hold: their reassemblers' bytes (every transfer gathered, an
// earlier drive's too: advanceDrive), and what waits for `answered`
// (chunk 0 or frame 0 and those held after it, or a payload reassembled
// here; a whole answer in one message is not counted). Counters that only
// agree with each other would pass a transfer let go without its bytes, or
// bytes counted for a transfer let go.
func heldOf(c *Core) error {
	var sum int64
	for _, id := range slices.Sorted(maps.Keys(c.reqs)) {
		r := c.reqs[id]
		var streams int64
		for _, ra := range r.streams {
			streams += ra.Held()
		}
		if streams != r.streamBytes {
			return fmt.Errorf("request %s: its %d transfers hold %d bytes, counted %d", id, len(r.streams), streams, r.streamBytes)
		}
		var wait int64
		var s []AnswerChunk
		switch a := r.held; {
		case a == nil || !a.fwd:
		case r.chunks != nil:
			wait, s = int64(len(a.data)), r.chunks.held
		case r.stream != nil:
			wait, s = int64(len(a.data)), r.stream.held
		case r.waitBytes != 0:
			// Reassembled here: the payload's room. (A whole answer, not
			// counted, looks the same from here: a count missing for a
			// reassembled payload is not caught.)
			wait = int64(cap(a.data))
		}
		for _, e := range s {
			wait += int64(len(e.Data))
		}
		if !c.cfg.Logged {
			wait = 0 // nothing waits for a write: holdWaiting counts nothing
		}
		if wait != r.waitBytes {
			return fmt.Errorf("request %s: %d bytes wait for `answered`, counted %d", id, wait, r.waitBytes)
		}
		sum += streams + wait
	}
	if sum != c.heldBytes || sum > c.cfg.MaxHeldBytes {
		return fmt.Errorf("its requests hold %d bytes of answers, it counts %d (bound %d)", sum, c.heldBytes, c.cfg.MaxHeldBytes)
	}
	return nil
}

// transferSettled: after the calm, every transfer a caller saw begin has
// ended, or could not (its GW crashed, or its error end was not published).
func (rq *simReq) transferSettled() error {
	tr := rq.tr
	if tr == nil || tr.ended || tr.gone || tr.endLost {
		return nil
	}
	return fmt.Errorf("request %s: its transfer %s from %s never ended (%d messages, lost %t)", rq.id, tr.stream, tr.gw, tr.next, tr.lost)
}
