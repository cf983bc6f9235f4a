package messages

import (
	"strconv"
	"strings"

	"github.com/sg-project/sg/subjects"
)

// Messages of recovery: GW liveness and the request log.

// RecoveryVersion is the version of the GW heartbeat and request log entry.
const RecoveryVersion = 1

// GWHeartbeat tells the other GWs that a GW is alive, and which incarnation
// it is (StartedAt). A GW whose heartbeats stop for three periods, or whose
// StartedAt changes, is gone: its open requests are adopted by a peer.
type GWHeartbeat struct {
	V          uint8  `msgpack:"v"`
	GWID       string `msgpack:"gw"`
	StartedAt  int64  `msgpack:"started"`
	IntervalMS int64  `msgpack:"ivms"`
	Stopping   bool   `msgpack:"stopping,omitempty"` // last beat: adopt my requests now
}

// Validate checks the heartbeat.
func (m *GWHeartbeat) Validate() error {
	const typ = "GW heartbeat"
	if err := checkVersion(typ, m.V, RecoveryVersion); err != nil {
		return err
	}
	if err := validateID(typ, "GW id", m.GWID); err != nil {
		return err
	}
	if m.IntervalMS <= 0 || m.StartedAt <= 0 {
		return invalid(typ, "interval %d ms and start %d must be positive", m.IntervalMS, m.StartedAt)
	}
	return nil
}

// LogState is the state of a request log entry.
type LogState string

const (
	// LogOpen: accepted and not answered; the owner GW drives it.
	LogOpen LogState = "open"
	// LogAdopted: another GW took the request over. Written by earlier
	// versions; a GW now adopts by rewriting the open entry in place (naming
	// itself), which makes the old owner's conditional writes fail.
	LogAdopted LogState = "adopted"
	// LogAnswered: the answer is being sent; written before it is, so that
	// nobody else answers.
	LogAnswered LogState = "answered"
)

// LogEntry is one request in the request log: everything a GW needs to
// answer the caller and to drive the request again, should its GW or RC die.
type LogEntry struct {
	V uint8 `msgpack:"v"`
	// Chunks: the caller reassembles chunked answers (Sg-Accept-Chunks), so
	// an adopter passes a chunked answer on as the owner would. Absent in an
	// older GW's entry (false), and ignored by an older GW's decoder. (Beside
	// V: in its padding.)
	Chunks    bool   `msgpack:"chunks,omitempty"`
	RequestID string `msgpack:"req"` // the GW's unique id of the request (the submission carries the drive's)
	// ClientRequestID is the caller's own id, a label echoed on the answer;
	// Caller is what per-caller limits count (the reply's inbox prefix).
	ClientRequestID string   `msgpack:"clientReq,omitempty"`
	Caller          string   `msgpack:"caller,omitempty"`
	State           LogState `msgpack:"state"`
	// GWID and GWStarted: the owner and its incarnation.
	GWID      string `msgpack:"gw"`
	GWStarted int64  `msgpack:"gwStarted"`
	// ClientReply is the caller's reply subject; API, Content and LogCorr
	// shape the answer.
	ClientReply string  `msgpack:"clientReply"`
	API         string  `msgpack:"api"`
	Content     Content `msgpack:"content"`
	LogCorr     string  `msgpack:"corr,omitempty"`
	// Submission is what the RC received (its ReplyTo is where the answer
	// arrives, whichever GW listens); Drive counts the times it was driven
	// again (the drive's id is DriveID(RequestID, Drive)).
	Submission RCSubmission `msgpack:"sub"`
	Drive      uint32       `msgpack:"drive"`
	// RCID and RCStarted: the RC of the current drive and its incarnation.
	RCID      string `msgpack:"rc,omitempty"`
	RCStarted int64  `msgpack:"rcStarted,omitempty"`
	// By names the GW that wrote the last state (adopted, answered).
	By string `msgpack:"by,omitempty"`
}

// Validate checks the entry.
func (m *LogEntry) Validate() error {
	const typ = "request log entry"
	if err := checkVersion(typ, m.V, RecoveryVersion); err != nil {
		return err
	}
	switch m.State {
	case LogOpen, LogAdopted, LogAnswered:
	default:
		return invalid(typ, "unknown state %q", truncate(string(m.State), 16))
	}
	if err := validateID(typ, "GW id", m.GWID); err != nil {
		return err
	}
	if err := validateID(typ, "request id", m.RequestID); err != nil {
		return err
	}
	if m.ClientRequestID != "" {
		if err := validateID(typ, "client request id", m.ClientRequestID); err != nil {
			return err
		}
	}
	if len(m.Caller) > maxReplyLen {
		return invalid(typ, "caller must be at most %d bytes", maxReplyLen)
	}
	if m.ClientReply == "" || len(m.ClientReply) > maxReplyLen {
		return invalid(typ, "client reply subject must be 1..%d bytes", maxReplyLen)
	}
	if m.Content != ContentMsgpack && m.Content != ContentJSON {
		return invalid(typ, "content %q", truncate(string(m.Content), 16))
	}
	if err := validateText(typ, "logCorr", m.LogCorr, maxLogCorrLen); err != nil {
		return err
	}
	return m.Submission.Validate()
}

// HdrLogAnswered names the writer of a request log `answered` record: the
// record is that header on an empty body (no entry), "<GW id> <GW
// incarnation> <drive>". An empty record is closed to this GW and to older
// ones back to those that wrote empty closing records themselves: no sweep
// adopts it or counts it as poison (GWs older still skip it as poison, which
// they count once). The header is for its writer alone,
// reading back a write whose acknowledgement was lost: its own, or a peer's
// answer or adoption. The record names no request: the subject it is on
// does (log.req.<GW>.<request>), so it cannot be misfiled.
const HdrLogAnswered = "Sg-Log-Answered"

// maxLogAnsweredLen bounds an HdrLogAnswered value read back: an id, two
// decimal numbers and two spaces.
const maxLogAnsweredLen = subjects.MaxTokenLen + 2*20 + 2

// AppendLogAnswered appends the HdrLogAnswered value naming e's writer (its
// By, incarnation and drive) to b.
func AppendLogAnswered(b []byte, e *LogEntry) []byte {
	b = append(b, e.By...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.GWStarted, 10)
	b = append(b, ' ')
	return strconv.AppendUint(b, uint64(e.Drive), 10)
}

// ParseLogAnswered reads an HdrLogAnswered value back as the entry it
// stands for: request requestID (its subject's), answered by the GW it
// names, in that incarnation, at that drive. The rest of the entry is not
// in the record and stays empty.
func ParseLogAnswered(requestID, v string) (LogEntry, error) {
	const typ = "request log answered record"
	if len(v) > maxLogAnsweredLen {
		return LogEntry{}, invalid(typ, "%d bytes, at most %d", len(v), maxLogAnsweredLen)
	}
	by, rest, ok1 := strings.Cut(v, " ")
	started, drive, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return LogEntry{}, invalid(typ, "%q is not <GW> <incarnation> <drive>", truncate(v, 64))
	}
	if err := validateID(typ, "GW id", by); err != nil {
		return LogEntry{}, err
	}
	inc, err := strconv.ParseInt(started, 10, 64)
	if err != nil {
		return LogEntry{}, invalid(typ, "incarnation %q", truncate(started, 24))
	}
	n, err := strconv.ParseUint(drive, 10, 32)
	if err != nil {
		return LogEntry{}, invalid(typ, "drive %q", truncate(drive, 24))
	}
	return LogEntry{V: RecoveryVersion, RequestID: requestID, State: LogAnswered, GWID: by, GWStarted: inc,
		Drive: uint32(n), By: by}, nil
}

// DriveSep separates a request id from its drive number in the id a re-driven
// request carries through RC, DAPs and Agg ("abc~2"). A GW refuses client
// request ids that contain it.
const DriveSep = "~"

// DriveID is the id under which drive n of request id runs: the id itself for
// the first drive, id~n after. Each drive is a separate request for RC, DAPs
// and Agg (nothing of an earlier drive can mix into it); the GW routes every
// drive's answer by the client's id and answers once.
func DriveID(id string, n uint32) string {
	if n == 0 {
		return id
	}
	return id + DriveSep + uitoa(uint64(n))
}

func uitoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
