package core

import (
	"container/heap"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// Answer streams (messages/stream.go): a caller that reads streams
// (Sub.Stream) is answered frame by frame as the Agg sends them, never
// reassembled here. The first frame decides the answer like a whole one: it
// is held while `answered` is written, and goes out with Answer; the frames
// that come meanwhile wait in a bounded buffer. After the Answer the request
// is no longer held (its one answer has begun) and its frames are relayed as
// they come until the last, a gap, or its deadline plus TimeoutMargin: a
// stream that stops short ends with an error frame, never looks whole.

// MaxHeldFrames bounds the frames held while `answered` is written: about
// that many windows of the Agg's. Past it the stream is ended with an error
// once the answer goes out. An Agg told that this GW paces its stream
// (messages.AggExpectation.StreamStart) sends messages.StreamStartFrames
// frames and then waits for StartStream, which goes with the Answer: it
// never gets here, however slow the write; an older Agg may.
const MaxHeldFrames = 32

// The Agg's frames before StartStream (frame 0 and the held ones) must fit.
const _ = uint(MaxHeldFrames - messages.StreamStartFrames)

// maxHeldChunks bounds the chunks of a chunked answer held while `answered`
// is written, in number (their bytes are bounded by MaxAnswerBytes): the
// Agg cuts chunks of 62 KiB (defaults.AggAnswerChunk), so that a largest
// answer (256 MiB, defaults) is about 4,250 of them; 8,192 hold it with
// room, and hold 256 MiB in chunks of a 32 KiB max payload. Past it the
// answer is ended with a chunk end once it goes out.
const maxHeldChunks = 8192

// Relay: publish one frame of an answer stream, or one chunk of a chunked
// answer passed on as it comes, to Info.Reply (after the request's Answer).
// Header and Data are the Agg's; with Status not OK and no Data, it is the
// GW's own last message ending a broken stream (Header carries the stream id
// and sequence) or transfer (a chunk end: messages.IsChunkEnd).
type Relay struct {
	Info   Info
	Header nats.Header
	Data   []byte
	Status messages.Status
	End    bool
}

func (Relay) isCommand() {}

// Chunked answers: a caller that reassembles chunks (Chunks) gets a chunked
// answer chunk by chunk as it comes, never reassembled here, when the answer
// names the caller's own request id (the Agg writes AggExpectation.AnswerID:
// nothing in it to rewrite) and its chunks fit the max payload with the
// caller's ids in their headers; any other chunked answer is reassembled
// first (request.go). Chunk 0 decides the answer like a whole one and is
// held while `answered` is written, with the chunks that come meanwhile (at
// most the answer: MaxAnswerBytes). A messages.ChunkRelay checks them in
// order, and the last is passed on only once the whole checked out (sizes,
// checksum): a transfer that breaks (a chunk lost or forged, an Agg that
// stops, the deadline) never completes at the caller, and ends with a
// message messages.IsChunkEnd reports; so does one a message of which the
// shell could not publish (RelayFailed).

// relayMargin covers what the headers of a later chunk may add to chunk 0's
// (a wider index) when chunk 0 is checked against the max payload.
const relayMargin = 32

// chunkState is a chunked answer chunk 0 of which is held while `answered`
// is written.
type chunkState struct {
	cr     *messages.ChunkRelay
	held   []AnswerChunk
	end    bool   // its last chunk came and the whole checked out
	broken string // why it cannot complete ("" while it can)
}

// relay is a stream or chunked answer being relayed: its request was
// answered with frame (chunk) 0.
type relay struct {
	info     Info
	stream   string
	next     int
	chunks   *messages.ChunkRelay // a chunked answer's, nil for a stream
	deadline int64                // past it the stream is ended with an error
	seq      uint64               // its entry in Core.relayTimers
	// start: the stream's StartStream, sent again every StartResend until
	// frame messages.StreamStartFrames comes (its Agg may wait for it);
	// nil: not (any more).
	start *StartStream
}

// StartResend is how often a StartStream is sent again while the frame its
// Agg sends only once it has the signal (messages.StreamStartFrames) has
// not come: a lost signal (NATS core delivers at most once) then costs a
// pause, not the stream (its Agg would wait until the deadline). A slow
// Agg still sending its first frames gets one small message a second.
const StartResend = int64(time.Second)

// relayChunk handles a chunk of a chunked answer that is relayed as it comes
// or starts relaying one; false: request.go reassembles it (or drops it).
func (c *Core) relayChunk(e AnswerChunk) bool {
	if e.Header.Get(messages.HdrChunkIndex) == "" {
		return false
	}
	stream := e.Header.Get(messages.HdrChunkStream)
	if rl := c.relays[e.ID]; rl != nil {
		if rl.chunks == nil || stream != rl.stream {
			c.emit(Dropped{ID: e.ID, Why: "chunk of a second answer"})
			return true
		}
		pass, last, err := rl.chunks.Add(e.Header, e.Data)
		switch {
		case err != nil:
			c.endRelay(e.ID, rl, err.Error())
		case pass:
			rl.next++
			c.emit(Relay{Info: rl.info, Header: e.Header, Data: e.Data, End: last})
			if last {
				delete(c.relays, e.ID)
			}
		default:
			c.emit(Dropped{ID: e.ID, Why: "a repeated chunk"})
		}
		return true
	}
	r := c.reqs[e.ID]
	if r == nil {
		return false
	}
	if s := r.chunks; s != nil {
		switch {
		case stream != s.cr.Stream():
			c.emit(Dropped{ID: e.ID, Why: "chunk of a second answer"})
		case s.broken != "" || s.end:
		default:
			pass, last, err := s.cr.Add(e.Header, e.Data)
			switch {
			case err != nil:
				s.broken = err.Error()
			case pass && len(s.held) >= maxHeldChunks:
				s.broken = "the request log's write held the answer past " + itoa(maxHeldChunks) + " chunks"
			case pass && !c.holdWaiting(r, len(e.Data)):
				s.broken = textHeldFull
			case pass:
				s.held = append(s.held, e)
				s.end = last
			}
		}
		return true
	}
	if r.held != nil || len(r.streams) > 0 || slices.Contains(r.dropped, stream) || !c.relayable(r, e) {
		return false // request.go: an earlier drive's broken transfer's chunk is dropped there
	}
	cr := messages.NewChunkRelay(c.cfg.MaxAnswerBytes)
	if pass, last, err := cr.Add(e.Header, e.Data); err != nil || !pass || last {
		return false // reassembled: one chunk alone, or one that does not check out
	}
	if !c.holdWaiting(r, len(e.Data)) {
		r.held = c.heldFull(r)
		c.advance(r)
		return true
	}
	r.chunks = &chunkState{cr: cr}
	r.held = &answer{fwd: true, chunk: true, header: e.Header, data: e.Data}
	c.advance(r)
	return true
}

// relayable: chunk 0 of an answer to r that may be passed on as it comes.
func (c *Core) relayable(r *request, e AnswerChunk) bool {
	if !r.Chunks || c.cfg.MaxPayload <= 0 || e.Header.Get(messages.HdrChunkIndex) != "0" {
		return false
	}
	ids := len(messages.HdrRequestID) + len(r.ClientID) + len(messages.HdrTraceID) + len(r.ID) + 8
	if int64(len(e.Data)+messages.HeaderSize(e.Header)+ids+relayMargin) > c.cfg.MaxPayload {
		return false
	}
	return messages.ResponseNamesID(r.Content, e.Data, r.ClientID)
}

// streamState is a stream frame 0 of which is held while `answered` is written.
type streamState struct {
	id     string
	next   int
	end    bool // its last frame has come
	held   []AnswerChunk
	broken string // why it cannot go on whole ("" while it can)
	// agg and drive address StartStream: frame 0's Sg-Agg-Id and
	// Sg-Request-Id, "" when either is not a valid subject token (no
	// signal goes: an Agg that waits for one ends at its deadline).
	agg, drive string
	// unread: its first frame did not read, and the request is answered
	// the GW's error (unreadableFrame); its StartStream goes all the same.
	unread bool
}

// streamStart is who a StartStream for stream id of request r goes to, from
// the headers h of its first frame: its Sg-Agg-Id and Sg-Request-Id (one of
// r's drives), "" when they are not that.
func streamStart(r *request, h nats.Header, id string) (agg, drive string) {
	agg, drive = h.Get(messages.HdrAggID), h.Get(messages.HdrRequestID)
	if subjects.Validate("Agg id", agg) == nil && subjects.Validate("drive id", drive) == nil && subjects.Validate("stream id", id) == nil &&
		ownDrive(r.ID, drive) {
		return agg, drive
	}
	return "", ""
}

// streamFrame handles one frame on a request's answer subject.
func (c *Core) streamFrame(e AnswerChunk) {
	f, err := messages.ReadStreamFrame(e.Header)
	if err != nil {
		c.unreadableFrame(e, f, err)
		return
	}
	if rl := c.relays[e.ID]; rl != nil {
		if f.ID != rl.stream || rl.chunks != nil {
			c.emit(Dropped{ID: e.ID, Why: "frame of a second answer stream"})
			return
		}
		if f.Seq != rl.next {
			c.endRelay(e.ID, rl, "frames were lost (frame "+itoa(f.Seq)+" came, "+itoa(rl.next)+" expected)")
			return
		}
		rl.next++
		if rl.next > messages.StreamStartFrames {
			rl.start = nil // its Agg had the signal
		}
		c.emit(Relay{Info: rl.info, Header: e.Header, Data: e.Data, End: f.End})
		if f.End {
			delete(c.relays, e.ID)
		}
		return
	}
	r := c.reqs[e.ID]
	switch {
	case r == nil:
		c.emit(Dropped{ID: e.ID, Why: "stream frame for a request not held here"})
		return
	case !r.Sub.Stream:
		c.emit(Dropped{ID: e.ID, Why: "stream frame for a caller that does not read streams"})
		return
	case r.held == nil:
		if f.Seq != 0 {
			c.emit(Dropped{ID: e.ID, Why: "stream frame before its first"})
			return
		}
		c.dropStreams(r)
		if !c.holdWaiting(r, len(e.Data)) {
			// Not passed on: its caller gets the bound's error, and its
			// Agg the signal it may wait for (finish), to send the rest,
			// dropped here.
			r.stream = &streamState{id: f.ID, end: true, broken: textHeldFull, unread: true}
			r.stream.agg, r.stream.drive = streamStart(r, e.Header, f.ID)
			r.held = c.heldFull(r)
			c.advance(r)
			return
		}
		r.stream = &streamState{id: f.ID, next: 1, end: f.End}
		r.stream.agg, r.stream.drive = streamStart(r, e.Header, f.ID)
		r.held = &answer{fwd: true, header: e.Header, data: e.Data}
		c.advance(r)
		return
	case r.stream == nil || r.stream.id != f.ID:
		c.emit(Dropped{ID: e.ID, Why: "frame of a second answer"})
		return
	}
	s := r.stream
	switch {
	case s.broken != "" || s.end:
		return
	case f.Seq != s.next:
		s.broken = "frames were lost (frame " + itoa(f.Seq) + " came, " + itoa(s.next) + " expected)"
	case len(s.held) >= MaxHeldFrames:
		s.broken = "the request log's write held the stream past " + itoa(MaxHeldFrames) + " frames"
	case !c.holdWaiting(r, len(e.Data)):
		s.broken = textHeldFull
	default:
		s.next++
		s.end = f.End
		s.held = append(s.held, e)
	}
}

// unreadableFrame handles a frame on e.ID's answer subject whose stream
// headers do not read (err; f has what did). The stream it belongs to (f.ID,
// or any when the id does not read either) cannot go on whole: its caller
// gets an error at once, where dropping the frame would leave the break to
// the next frame's gap, or to the deadline when it was the last. Frame 0, as
// far as can be told (none came yet): the request is answered the GW's
// error, and its Agg, which may wait for the signal, gets its StartStream
// with it (finish) and sends the rest, dropped here.
func (c *Core) unreadableFrame(e AnswerChunk, f messages.StreamFrame, err error) {
	why := "a frame does not read (" + err.Error() + ")"
	// A frame that names no stream is not the Agg's (it names its stream on
	// every frame): reported, and it ends nothing, or one message with no
	// ids could break any answer on this subject.
	ours := func(stream string) bool { return f.ID != "" && f.ID == stream }
	ends := false
	if rl := c.relays[e.ID]; rl != nil {
		if ends = rl.chunks == nil && ours(rl.stream); ends {
			// After Malformed: counted and logged before the caller sees the end.
			defer c.endRelay(e.ID, rl, why)
		}
	} else if r := c.reqs[e.ID]; r != nil && r.Sub.Stream {
		switch s := r.stream; {
		case r.held == nil && f.ID != "" && r.otherDrive(e.Header):
			// An earlier drive's stream cannot go on whole either, but the
			// current drive may still answer: dropped (its later frames
			// are, as frames before a first), not answered. Its Agg gets no
			// StartStream (one goes only after its request's Answer), as a
			// second answer's stream does not: a paced one holds its
			// partials until its deadline.
			defer c.emit(Dropped{ID: e.ID, Why: "an earlier drive's answer stream broke at its first frame (" + why + "); the current drive may still answer"})
		case r.held == nil && f.ID != "":
			ends = true
			c.dropStreams(r)
			r.stream = &streamState{id: f.ID, end: true, broken: why, unread: true}
			r.stream.agg, r.stream.drive = streamStart(r, e.Header, f.ID)
			r.held = &answer{status: messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream broken at its first frame: %s", why)}
			defer c.advance(r) // after Malformed: the log line before the answer's
		case s != nil && ours(s.id) && s.broken == "" && !s.end:
			ends = true
			s.broken = why
		}
	}
	c.emit(Malformed{ID: e.ID, Kind: MalformedStreamFrame, Err: err, Ends: ends})
}

// ownDrive reports whether drive is one of request id's drives
// (messages.DriveID): a frame 0 that names another request's drive
// addresses no StartStream.
func ownDrive(id, drive string) bool {
	_, ok := driveOf(id, drive)
	return ok
}

// driveOf is the number of drive, one of request id's drives
// (messages.DriveID); false when it is none of them.
func driveOf(id, drive string) (uint32, bool) {
	rest, ok := strings.CutPrefix(drive, id)
	if !ok {
		return 0, false
	}
	if rest == "" {
		return 0, true
	}
	num, ok := strings.CutPrefix(rest, messages.DriveSep)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 32)
	return uint32(n), err == nil
}

// startRelay follows a request's Answer (frame 0): the frames held meanwhile
// go out, and the rest are relayed as they come.
func (c *Core) startRelay(r *request, info Info) {
	if r.chunks != nil {
		c.startChunkRelay(r, info)
		return
	}
	s := r.stream
	if s == nil {
		return
	}
	for _, e := range s.held {
		end := e.Header.Get(messages.HdrStreamEnd) == "1"
		c.emit(Relay{Info: info, Header: e.Header, Data: e.Data, End: end})
	}
	var start *StartStream
	if !s.end && s.agg != "" {
		// Its Agg may wait for this after messages.StreamStartFrames (a
		// broken stream's too: it is not left waiting until its deadline).
		start = &StartStream{Info: info, AggID: s.agg, DriveID: s.drive, StreamID: s.id}
		c.emit(*start)
	}
	if s.end && s.broken == "" {
		return
	}
	rl := &relay{info: info, stream: s.id, next: s.next, deadline: r.Deadline + c.cfg.TimeoutMargin}
	if s.next <= messages.StreamStartFrames {
		rl.start = start
	}
	c.follow(r.ID, rl, s.broken)
}

// follow relays the rest of an answer as it comes, or ends it at once when
// it broke while its first frame (chunk) was held.
func (c *Core) follow(id string, rl *relay, broken string) {
	if broken == "" && c.aborted {
		// Begun after Abort (its `answered` came since): the GW stops before
		// it could pass on the rest, and Abort ended the others already.
		broken = "the gateway is stopping"
	}
	if broken != "" {
		c.endRelay(id, rl, broken)
		return
	}
	if c.relays == nil {
		c.relays = map[string]*relay{}
	}
	c.relays[id] = rl
	c.relaySeq++
	rl.seq = c.relaySeq
	heap.Push(&c.relayTimers, timer{at: rl.deadline, id: id, gen: rl.seq})
	c.armResend(id, rl)
}

// armResend sets rl's timer to send its StartStream again, if it is to be
// and before its deadline (the timers before it are resends: expireRelays).
func (c *Core) armResend(id string, rl *relay) {
	if at := c.now + StartResend; rl.start != nil && at < rl.deadline {
		heap.Push(&c.relayTimers, timer{at: at, id: id, gen: rl.seq})
	}
}

// startChunkRelay follows a chunked answer's Answer (chunk 0): the chunks
// held meanwhile go out, and the rest are relayed as they come.
func (c *Core) startChunkRelay(r *request, info Info) {
	s := r.chunks
	for i, e := range s.held {
		c.emit(Relay{Info: info, Header: e.Header, Data: e.Data, End: s.end && i == len(s.held)-1})
	}
	if s.end {
		return
	}
	c.follow(r.ID, &relay{info: info, stream: s.cr.Stream(), next: s.cr.Next(), chunks: s.cr, deadline: r.Deadline + c.cfg.TimeoutMargin}, s.broken)
}

// endRelay ends a stream or chunked answer that cannot go on with the GW's
// own last message: a frame, or a chunk end (messages.IsChunkEnd).
func (c *Core) endRelay(id string, rl *relay, why string) {
	delete(c.relays, id)
	count := 0
	if rl.chunks != nil {
		count = rl.chunks.Count()
	}
	c.emit(brokenEnd(rl.info, rl.chunks != nil, rl.stream, rl.next, count, why))
}

// brokenEnd is the last message of a transfer (chunked) or stream that
// broke after next chunks (frames) of count (0 for a stream).
func brokenEnd(info Info, chunked bool, stream string, next, count int, why string) Relay {
	h := nats.Header{}
	var st messages.Status
	if chunked {
		h.Set(messages.HdrChunkStream, stream)
		st = messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer broken after %d of %d chunks: %s", next, count, why)
	} else {
		messages.SetStreamFrame(h, stream, next, true)
		st = messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream broken after %d frames: %s", next, why)
	}
	return Relay{Info: info, Header: h, End: true, Status: st}
}

// relayFailed ends an answer one message of which could not be published:
// the relay under way, or, when the failed message was its last (the relay
// is over), with an end built from that message's place in the transfer.
// An error end that failed is not sent again.
func (c *Core) relayFailed(e RelayFailed) {
	id := e.Info.ID
	why := "a message could not be sent to the caller"
	if e.Err != nil {
		why += ": " + e.Err.Error()
	}
	rl := c.relays[id]
	switch {
	case e.Answered:
		if rl != nil {
			delete(c.relays, id)
		}
		c.emit(Dropped{ID: id, Why: "the caller was answered an error instead of the rest of its answer"})
	case rl != nil:
		// The caller got the messages before the one that failed (the shell
		// sends none after it): the end says so, and a stream's end frame
		// takes the failed frame's place in the sequence.
		if at, ok := relayIndex(e.Header); ok && at < rl.next {
			rl.next = at
		}
		c.endRelay(id, rl, why)
	case messages.IsChunkEnd(e.Header):
	case e.Header.Get(messages.HdrChunkIndex) != "":
		next, _ := relayIndex(e.Header)
		count, _ := strconv.Atoi(e.Header.Get(messages.HdrChunkCount))
		c.emit(brokenEnd(e.Info, true, e.Header.Get(messages.HdrChunkStream), next, count, why))
	default:
		f, err := messages.ReadStreamFrame(e.Header)
		if err != nil {
			return
		}
		if st, err := messages.ReadStatus(e.Header); err == nil && !st.IsOK() {
			return // the GW's error frame itself
		}
		c.emit(brokenEnd(e.Info, false, f.ID, f.Seq, 0, why))
	}
}

// relayIndex is the place of a relayed message in its transfer: a chunk's
// index or a frame's sequence number.
func relayIndex(h nats.Header) (int, bool) {
	if v := h.Get(messages.HdrChunkIndex); v != "" {
		i, err := strconv.Atoi(v)
		return i, err == nil && i >= 0
	}
	if f, err := messages.ReadStreamFrame(h); err == nil {
		return f.Seq, true
	}
	return 0, false
}

// endRelays ends every stream under way, in request id order.
func (c *Core) endRelays(why string) {
	ids := make([]string, 0, len(c.relays))
	for id := range c.relays {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c.endRelay(id, c.relays[id], why)
	}
}

// expireRelays ends the answers still being passed on at their request's
// deadline plus TimeoutMargin, the last frame or chunk not come by then
// (an Agg that fell silent, or one too slow for the deadline), in deadline
// and then id order; NextDeadline has the shell step the core then.
func (c *Core) expireRelays() {
	for c.relayTimers.Len() > 0 && c.relayTimers[0].at <= c.now {
		t := heap.Pop(&c.relayTimers).(timer)
		if !c.relayTimerLive(t) {
			continue
		}
		rl := c.relays[t.id]
		if t.at < rl.deadline { // a resend's (armResend)
			if rl.start != nil {
				again := *rl.start
				again.Again = true
				c.emit(again)
				c.armResend(t.id, rl)
			}
			continue
		}
		c.endRelay(t.id, rl, "the answer was not whole by the request's deadline")
	}
}

// Relaying is the number of answer streams and chunked answers being passed on.
func (c *Core) Relaying() int { return len(c.relays) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
