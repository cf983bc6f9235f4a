package core

import (
	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Event is an input to Step. Every event carries the time the shell
// observed it, unix nanoseconds.
type Event interface{ at() int64 }

// Arrived: a client request passed decoding and checks; the core admits it
// (limits, shutdown) or refuses it, and drives it to its one answer.
type Arrived struct {
	At  int64
	Req Request
}

// Tick: time passed (the shell's timer for NextDeadline, and a periodic one
// for RC liveness). Late is how much later than AnnounceEvery after the
// shell's last Tick this one came (ns; the shell's stall.Watch): the GW's own
// stall, not counted as its RCs' silence. The core credits it as it is
// and does not measure it itself.
type Tick struct {
	At   int64
	Late int64
}

// RCAnnounced: an RC's announcement (a new StartedAt is a restart).
type RCAnnounced struct {
	At int64
	RC RCInfo
}

// LogWritten: the WriteLog for request ID was acknowledged at Seq.
type LogWritten struct {
	At  int64
	ID  string
	Seq uint64
}

// LogFailed: the WriteLog for request ID failed for another reason than its
// condition; it may or may not have been stored.
type LogFailed struct {
	At  int64
	ID  string
	Err error
}

// LogConflict: the WriteLog for request ID was refused because the subject
// changed. Current is what it holds now (nil: nothing, purged) at Seq, as
// the shell read it back: a write of ours whose acknowledgement was lost
// shows up here as our own entry.
type LogConflict struct {
	At      int64
	ID      string
	Current *messages.LogEntry
	Seq     uint64
}

// SubmitFailed: publishing drive Drive of request ID to its RC failed.
type SubmitFailed struct {
	At    int64
	ID    string
	Drive uint32
	Err   error
}

// RelayFailed: a message of an answer passed on as it comes (an Answer with
// Relayed, or a Relay) could not be published to the caller; Header is that
// message's. The transfer cannot complete: the core ends it with its error
// end (a chunk end, messages.IsChunkEnd, or an error frame) where one can
// still go. Answered: the caller was answered otherwise instead (an error
// status): nothing more goes to it. Relays for the same request that came
// after the failed one in the same Step are not published.
type RelayFailed struct {
	At       int64
	Info     Info
	Header   nats.Header
	Err      error
	Answered bool
}

// AnswerChunk: a message arrived on a request's answer subject (ID is its
// last token): a whole answer, or one chunk of one.
type AnswerChunk struct {
	At     int64
	ID     string
	Header nats.Header
	Data   []byte
}

// Adopt: the shell found an open log entry whose GW is gone (stopped,
// restarted or silent for DeadAfter); the core takes it over unless it
// already holds it.
type Adopt struct {
	At      int64
	Subject string
	Seq     uint64
	Entry   messages.LogEntry
}

// Cancel: a caller cancels its request(s) with client id ClientID; Reply is
// the cancel's own reply subject (answered only if this GW holds one).
type Cancel struct {
	At       int64
	Caller   string
	ClientID string
	Reply    string
}

// Stop: the GW stops accepting. Requests not yet logged are answered
// UNAVAILABLE; the others may still finish until Abort.
type Stop struct{ At int64 }

// Abort: the shutdown grace is over. Without a request log the rest are
// answered UNAVAILABLE; with one they are released for adoption (an answer
// whose `answered` write is under way is still sent when it is acked).
type Abort struct{ At int64 }

func (e Arrived) at() int64      { return e.At }
func (e Tick) at() int64         { return e.At }
func (e RCAnnounced) at() int64  { return e.At }
func (e LogWritten) at() int64   { return e.At }
func (e LogFailed) at() int64    { return e.At }
func (e LogConflict) at() int64  { return e.At }
func (e SubmitFailed) at() int64 { return e.At }
func (e AnswerChunk) at() int64  { return e.At }
func (e RelayFailed) at() int64  { return e.At }
func (e Adopt) at() int64        { return e.At }
func (e Cancel) at() int64       { return e.At }
func (e Stop) at() int64         { return e.At }
func (e Abort) at() int64        { return e.At }
