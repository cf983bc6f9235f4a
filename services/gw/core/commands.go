package core

import (
	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Command is an output of Step, for the shell to carry out in order.
type Command interface{ isCommand() }

// WriteLog: write Entry on Subject of the request log with "the last
// sequence on this subject is ExpectSeq" (0: no message yet) as the
// condition, and report LogWritten, LogConflict (with what the subject holds
// now) or LogFailed. The core has at most one write per request under way.
type WriteLog struct {
	ID        string
	Subject   string
	Entry     messages.LogEntry
	ExpectSeq uint64
	Op        string // create, refuse, update, answered, adopt: for logs and metrics
}

// Purge: remove Subject from the request log (its answer was sent; its last
// record is the `answered` entry this GW wrote). A shell may have written
// `answered` with a TTL that removes it (see services/gw requestlog).
type Purge struct {
	ID      string
	Subject string
}

// Submit: publish Sub to RC RCID on subjects.RCSubmit, with the routing
// headers (Sub.RequestID is the drive's id), Sg-Client-Request-Id and
// Sg-Caller. Why is "" for a first drive, else the re-drive's reason.
type Submit struct {
	Info  Info
	RCID  string
	Drive uint32
	Sub   messages.RCSubmission
	Why   string
}

// CancelDrive: tell RC RCID to stop drive DriveID (subjects.RCCancel, the
// drive id in Sg-Request-Id, no body).
type CancelDrive struct {
	ID      string
	RCID    string
	DriveID string
}

// Answer: send the request's one answer to Info.Reply. Forward: the RC's or
// Agg's bytes (Header, Data; Err when they cannot be forwarded), else the
// GW's own Status; Limit and RetryAfter (seconds) name a limit that was hit.
// Accepted is false for a refusal (the request was never admitted). Chunk:
// Data is chunk 0 of a chunked answer passed on as it comes (relay.go):
// publish it as it is, with the caller's ids in its headers; the rest
// follow as Relay. Relayed: this is the first message of an answer passed
// on as it comes (chunk 0, or frame 0 of a stream that goes on); its
// outcome is known only with the last Relay (End), and a failure to
// publish it or any Relay is reported as RelayFailed.
type Answer struct {
	Info       Info
	Forward    bool
	Chunk      bool
	Relayed    bool
	Header     nats.Header
	Data       []byte
	Err        error
	Status     messages.Status
	Limit      string
	RetryAfter int
	Accepted   bool
}

// StartStream: tell Agg AggID to send the rest of answer stream StreamID of
// drive DriveID (subjects.AggStart, headers only: Sg-Request-Id is DriveID,
// Sg-Stream-Id StreamID). The Agg sends messages.StreamStartFrames frames of
// a stream and then waits for it, so that the frames held while `answered`
// is written stay few (relay.go); the core emits it once per stream, with
// the Answer (frame 0), when the stream's last frame has not come yet.
// AggID and DriveID are checked subject tokens. Again: the same signal sent
// again (StartResend), the Agg's frame messages.StreamStartFrames not come.
type StartStream struct {
	Info     Info
	AggID    string
	DriveID  string
	StreamID string
	Again    bool
}

// AnswerCancel: answer a cancel on Reply.
type AnswerCancel struct {
	Reply    string
	ClientID string
	Status   messages.Status
}

// Released: the GW stopped with the request unanswered; its log entry stays
// open for a peer or the next incarnation to adopt.
type Released struct{ Info Info }

// Dropped: an answer message the core will not forward (a duplicate, late,
// for a request this GW does not hold, or of an earlier drive's transfer
// that broke: let go with its bytes, the current drive may still answer), a
// request it let go because another GW took it over, or an adoption it
// ignored (the request's answer is being relayed here).
type Dropped struct {
	ID  string
	Why string
}

// HeldFull: request ID's answer ended because what the core holds of
// answers would pass MaxHeldBytes (for metrics and logs).
type HeldFull struct{ ID string }

// Malformed: a message on request ID's answer subject that does not read
// (Kind "stream_frame": a frame whose stream headers do not; Err says why),
// for metrics and logs. Ends: the request's answer ends with an error for it
// at once (relay.go unreadableFrame); else it was skipped (a request not
// held here, or another answer's).
type Malformed struct {
	ID   string
	Kind string
	Err  error
	Ends bool
}

// MalformedStreamFrame is Malformed.Kind for a stream frame.
const MalformedStreamFrame = "stream_frame"

// Adopted: the core took an orphaned request over (for logs and metrics).
type Adopted struct {
	Info    Info
	FromGW  string
	Expired bool // past its deadline: it is answered the timeout
}

func (WriteLog) isCommand()     {}
func (Purge) isCommand()        {}
func (Submit) isCommand()       {}
func (CancelDrive) isCommand()  {}
func (Answer) isCommand()       {}
func (StartStream) isCommand()  {}
func (AnswerCancel) isCommand() {}
func (Released) isCommand()     {}
func (Dropped) isCommand()      {}
func (HeldFull) isCommand()     {}
func (Malformed) isCommand()    {}
func (Adopted) isCommand()      {}
