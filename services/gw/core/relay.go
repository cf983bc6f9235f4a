package core

import (
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Answer streams (messages/stream.go): a caller that reads streams
// (Sub.Stream) is answered frame by frame as the Agg sends them, never
// reassembled here. The first frame decides the answer like a whole one: it
// is held while `answered` is written, and goes out with Answer; the frames
// that come meanwhile wait in a bounded buffer. After the Answer the request
// is no longer held (its one answer has begun) and its frames are relayed as
// they come until the last, a gap, or its deadline plus TimeoutMargin: a
// stream that stops short ends with an error frame, never looks whole.

// maxHeldFrames bounds the frames held while `answered` is written: about
// that many windows of the Agg's. Past it the stream is ended with an error
// once the answer goes out.
const maxHeldFrames = 32

// Relay: publish one frame of an answer stream to Info.Reply (after the
// request's Answer). Header and Data are the Agg's frame; with Status not
// OK and no Data, it is the GW's own last frame ending a broken stream
// (Header carries the stream id and sequence).
type Relay struct {
	Info   Info
	Header nats.Header
	Data   []byte
	Status messages.Status
	End    bool
}

func (Relay) isCommand() {}

// relay is a stream being relayed: its request was answered with frame 0.
type relay struct {
	info     Info
	stream   string
	next     int
	deadline int64 // past it the stream is ended with an error
}

// streamState is a stream frame 0 of which is held while `answered` is written.
type streamState struct {
	id     string
	next   int
	end    bool // its last frame has come
	held   []AnswerChunk
	broken string // why it cannot go on whole ("" while it can)
}

// streamFrame handles one frame on a request's answer subject.
func (c *Core) streamFrame(e AnswerChunk) {
	f, err := messages.ReadStreamFrame(e.Header)
	if err != nil {
		c.emit(Dropped{ID: e.ID, Why: "malformed stream frame: " + err.Error()})
		return
	}
	if rl := c.relays[e.ID]; rl != nil {
		if f.ID != rl.stream {
			c.emit(Dropped{ID: e.ID, Why: "frame of a second answer stream"})
			return
		}
		if f.Seq != rl.next {
			c.endRelay(e.ID, rl, "frames were lost (frame "+itoa(f.Seq)+" came, "+itoa(rl.next)+" expected)")
			return
		}
		rl.next++
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
		r.streams = nil
		r.stream = &streamState{id: f.ID, next: 1, end: f.End}
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
	case len(s.held) >= maxHeldFrames:
		s.broken = "the request log's write held the stream past " + itoa(maxHeldFrames) + " frames"
	default:
		s.next++
		s.end = f.End
		s.held = append(s.held, e)
	}
}

// startRelay follows a request's Answer (frame 0): the frames held meanwhile
// go out, and the rest are relayed as they come.
func (c *Core) startRelay(r *request, info Info) {
	s := r.stream
	if s == nil {
		return
	}
	for _, e := range s.held {
		end := e.Header.Get(messages.HdrStreamEnd) == "1"
		c.emit(Relay{Info: info, Header: e.Header, Data: e.Data, End: end})
	}
	if s.end && s.broken == "" {
		return
	}
	rl := &relay{info: info, stream: s.id, next: s.next, deadline: r.Deadline + c.cfg.TimeoutMargin}
	if s.broken != "" {
		c.endRelay(r.ID, rl, s.broken)
		return
	}
	if c.relays == nil {
		c.relays = map[string]*relay{}
	}
	c.relays[r.ID] = rl
}

// endRelay ends a stream that cannot go on with the GW's own last frame.
func (c *Core) endRelay(id string, rl *relay, why string) {
	delete(c.relays, id)
	h := nats.Header{}
	messages.SetStreamFrame(h, rl.stream, rl.next, true)
	c.emit(Relay{Info: rl.info, Header: h, End: true,
		Status: messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream broken after %d frames: %s", rl.next, why)})
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

// expireRelays ends the streams whose Agg fell silent past the deadline.
func (c *Core) expireRelays() {
	for id, rl := range c.relays {
		if c.now >= rl.deadline {
			c.endRelay(id, rl, "no frame came before the request's deadline")
		}
	}
}

// Relaying is the number of answer streams being relayed.
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
