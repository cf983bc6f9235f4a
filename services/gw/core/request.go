package core

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

type phase uint8

const (
	phWait   phase = iota // admitted, waiting for a first RC; not logged, nothing promised
	phDefer               // submitted, not logged yet: answered without a log write, or its entry is written at createAt
	phCreate              // its log entry is being written (or, after a failure, refused)
	phAdopt               // taken over from the log: the adopt write is under way
	phDrive               // logged (or no log): submitted to rcID, or waiting for an RC (rcID "")
	phClose               // the answer is decided: the `answered` write is under way
)

// request is one request the core holds, from admission (or adoption) to its
// answer or release.
type request struct {
	Request
	phase     phase
	drive     uint32
	driveUsed bool // drive `drive` was submitted: a re-drive takes a new number
	rcID      string
	rcStarted int64
	waitUntil int64
	createAt  int64 // phDefer: when its entry is written, unless answered first

	logged  bool // its entry is in the log (subject, seq)
	subject string
	seq     uint64

	op      *writeOp // the log write under way (at most one)
	retry   *writeOp // a failed write to do again at retryAt
	retryAt int64

	held      *answer // the answer, once decided
	cancelled bool    // its caller cancelled it
	armedAt   int64   // the time of its valid timer, if any
	fromGW    string
	// fromRC, fromDrive: the drive the adopted entry names (an adopter's
	// request; fromRC "" for none), cancelled once the adoption lands.
	fromRC    string
	fromDrive uint32
	why       string // why the next submit is a re-drive ("" for a first drive)
	// streams: the chunked transfers gathered here, by chunk stream id, of
	// any of its drives: a re-drive keeps an earlier drive's (advanceDrive)
	// until it answers, or breaks (dropBroken).
	streams map[string]*messages.Reassembler
	// dropped: the chunk stream ids of earlier drives' transfers that broke
	// and were let go (dropBroken), the latest maxDroppedPerRequest: their
	// later chunks are dropped, not gathered into a transfer that cannot
	// complete (one evicted would take a streams slot until the request
	// ends: only past that many broken transfers, forged ones).
	dropped []string
	// streamBytes: what streams hold; waitBytes: what waits for `answered`
	// (frame or chunk 0 and those held in chunks or stream, or the answer
	// reassembled). Both are counted in Core.heldBytes.
	streamBytes, waitBytes int64
	stream                 *streamState // an answer stream whose frame 0 is held (relay.go)
	chunks                 *chunkState  // a chunked answer whose chunk 0 is held (relay.go)
	gen                    uint64       // current timer generation
}

type writeOp struct {
	kind   string // create, refuse, update, answered, adopt
	entry  messages.LogEntry
	expect uint64
	again  bool // written again after a failure: an earlier attempt may have landed
}

func (r *request) infoNow() Info {
	i := r.info()
	i.RCID, i.Drive = r.rcID, r.drive
	return i
}

// --- admission ---

func (c *Core) arrive(req Request) {
	refuse := func(st messages.Status, limit string) {
		c.stats.Refused++
		a := Answer{Info: req.info(), Status: st}
		if limit != "" {
			a.Limit, a.RetryAfter = limit, c.cfg.RetryAfter
		}
		c.emit(a)
	}
	switch {
	case c.stopping:
		refuse(unavailable(TextShuttingDown), "")
		return
	case c.reqs[req.ID] != nil || c.relays[req.ID] != nil:
		// The shell's ids are unique; a repeat is a bug, never two answers
		// (nor a second answer's relay in place of the first's).
		refuse(messages.Errorf(messages.CodeInternal, messages.CodeErr, "request id %s is already held or its answer relayed", req.ID), "")
		return
	case c.callers[req.Caller] >= c.cfg.MaxInFlightPerCaller:
		refuse(messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
			"Limit %s: this caller has %d requests in flight at this gateway, the most it may have; retry after %d s",
			LimitInFlightPerCaller, c.callers[req.Caller], c.cfg.RetryAfter), LimitInFlightPerCaller)
		return
	case len(c.reqs) >= c.cfg.MaxInFlight:
		refuse(messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
			"Limit %s: the service gateway is busy with %d requests in flight; retry after %d s",
			LimitInFlight, c.cfg.MaxInFlight, c.cfg.RetryAfter), LimitInFlight)
		return
	}
	r := &request{Request: req, phase: phWait}
	r.waitUntil = max(c.cfg.Start+c.cfg.StartupWait, c.rcs.failover(req.Sub.Header.Scope.Assembly, c.cfg.Affinity, c.failoverWindow()))
	c.hold(r)
	c.advance(r)
}

// failoverWindow: how long after a scope's RC last served a request for the
// scope waits for one rather than failing "No resources connected": as long
// as an RC may be silent before it is declared dead.
func (c *Core) failoverWindow() int64 {
	return max(announceMisses*c.cfg.AnnounceEvery, c.cfg.DeadAfter)
}

func (c *Core) hold(r *request) {
	c.reqs[r.ID] = r
	c.callers[r.Caller]++
}

func (c *Core) forget(r *request) {
	c.dropStreams(r)
	c.heldBytes -= r.waitBytes // sent (startRelay) or dropped with r
	r.waitBytes = 0
	delete(c.reqs, r.ID)
	if c.callers[r.Caller]--; c.callers[r.Caller] <= 0 {
		delete(c.callers, r.Caller)
	}
}

// --- the state machine ---

// advance does the request's next step when no log write is under way.
func (c *Core) advance(r *request) {
	if c.reqs[r.ID] != r || r.op != nil {
		return // answered or let go; or waiting for its write's result
	}
	if r.retry != nil {
		if c.aborted && r.retry.kind != "answered" {
			// Stopping with a write that keeps failing: the entry is open
			// in the log (a peer adopts it) or was never written. A failed
			// `answered` write may have landed: it is settled (written
			// again) before the GW lets the request go, or the answer would
			// be nobody's.
			c.release(r)
			return
		}
		if c.now < r.retryAt {
			c.arm(r, r.retryAt)
			return
		}
		op := r.retry
		r.retry = nil
		c.stats.LogRetries++
		c.write(r, op)
		return
	}
	switch r.phase {
	case phWait:
		c.advanceWait(r)
	case phDefer:
		c.advanceDefer(r)
	case phDrive:
		c.advanceDrive(r)
	}
}

// advanceWait: a new request picks its RC, or waits for one (early after
// start, or while its scope's RCs restart), or fails "No resources".
func (c *Core) advanceWait(r *request) {
	if r.held != nil {
		c.finish(r) // refused while waiting (cancel, stop): nothing was logged
		return
	}
	rc, why := c.rcs.pick(r.Sub.Header.Scope.Assembly, c.cfg.Affinity)
	if rc == nil {
		until := max(r.waitUntil, c.rcs.failover(r.Sub.Header.Scope.Assembly, c.cfg.Affinity, c.failoverWindow()))
		if c.cfg.HoldUntilReady && !c.rcs.served {
			until = r.Deadline
		}
		if c.now < until && c.now < r.Deadline {
			c.arm(r, min(until, r.Deadline))
			return
		}
		_ = why
		r.held = &answer{status: messages.Status{RC: messages.CodeNoResources, AC: messages.CodeErr, AI: TextNoResources}}
		c.finish(r)
		return
	}
	r.rcID, r.rcStarted = rc.ID, rc.StartedAt
	if !c.cfg.Logged {
		r.phase = phDrive
		c.advance(r)
		return
	}
	// The create and the first drive go out together: the log's round trip
	// leaves the critical path. What exactly-once needs still holds: no
	// answer is sent before the entry is written (the answer waits for the
	// create, then for `answered`); a request whose create never lands is
	// refused, and its drive cancelled; drive 0 is never reused (an adopter
	// takes the entry's drive + 1). A GW that dies before its create lands
	// promised nothing: the caller's own timeout fires, as before.
	r.subject = c.cfg.LogSubject(c.cfg.Self, r.ID)
	if c.cfg.CreateAfter > 0 && !c.stopping {
		// A request answered within CreateAfter costs the log nothing: no
		// entry, so no adopter, so this GW's answer is the only one.
		// Not past its deadline: what follows (the RC's timeout, the GW's
		// own) is a logged request's.
		r.phase, r.createAt = phDefer, min(c.now+c.cfg.CreateAfter, r.Deadline)
		c.submit(r, "")
		c.arm(r, r.createAt)
		return
	}
	c.create(r)
	c.submit(r, "")
}

// create writes r's entry, where nothing is yet.
func (c *Core) create(r *request) {
	r.phase = phCreate
	c.write(r, &writeOp{kind: "create", entry: c.entryOf(r, messages.LogOpen), expect: 0})
}

// advanceDefer: a submitted request not yet logged is answered at once
// (nothing was written, nobody else can answer it), or written to the log
// once CreateAfter has passed or the GW stops (a peer adopts what it leaves
// open). Its drive is running meanwhile: an RC that dies is noticed once
// the entry is written, as for a create under way.
func (c *Core) advanceDefer(r *request) {
	switch {
	case r.held != nil:
		c.close(r)
	case c.now >= r.createAt || c.stopping:
		c.create(r)
	default:
		c.arm(r, r.createAt)
	}
}

func (c *Core) advanceDrive(r *request) {
	if r.held != nil {
		c.close(r)
		return
	}
	if c.aborted {
		if c.cfg.Logged {
			c.release(r)
		} else {
			r.held = &answer{status: unavailable(TextShutDown)}
			c.close(r)
		}
		return
	}
	giveUp := r.Deadline + c.cfg.TimeoutMargin
	running := r.rcID != "" && r.driveUsed && c.rcs.alive(r.rcID, r.rcStarted)
	switch {
	case c.now >= giveUp:
		// Seed: the GW times out a request only when the RC has failed to.
		c.timeout(r)
		return
	case running:
		c.arm(r, giveUp)
		return
	case c.now >= r.Deadline:
		// No drive runs and the deadline has passed: nobody else will answer.
		c.timeout(r)
		return
	}
	// Submit the current drive, or drive again on an RC chosen afresh under
	// a new drive id: the dead drive's state at RC, DAPs and Agg cannot mix in.
	if r.rcID == "" || !c.rcs.alive(r.rcID, r.rcStarted) {
		rc, _ := c.rcs.pick(r.Sub.Header.Scope.Assembly, c.cfg.Affinity)
		if rc == nil {
			r.rcID, r.rcStarted = "", 0
			c.arm(r, min(giveUp, r.Deadline))
			return
		}
		r.rcID, r.rcStarted = rc.ID, rc.StartedAt
	}
	if r.driveUsed {
		// The earlier drive's transfers gathered in part (streams) stay, and
		// their bytes with them: the first answer of any of its drives is
		// the request's (doc.go), and an Agg in the middle of sending one
		// goes on when the RC goes, so it is the likeliest to answer first.
		// Let go here, its later chunks would begin a transfer that can
		// never complete. They go when a drive answers or the request ends,
		// or when one breaks: an earlier drive's break is not the answer
		// (dropBroken). An adopter's drive (adopt) keeps what came
		// meanwhile alike.
		r.why = "rc gone"
		r.drive++
		r.driveUsed = false
		c.stats.Redrives++
		if c.cfg.Logged {
			// The drive's number is in the log before it runs: an adopter
			// never reuses it.
			c.write(r, &writeOp{kind: "update", entry: c.entryOf(r, messages.LogOpen), expect: r.seq})
			return
		}
	}
	c.submit(r, r.why)
	r.why = ""
	c.arm(r, giveUp)
}

func (c *Core) submit(r *request, why string) {
	sub := r.Sub
	sub.RequestID = messages.DriveID(r.ID, r.drive)
	// This core sends StartStream for the answer's stream (relay.go): the Agg
	// may wait for it. Set on every drive, an adopted request's too (an
	// older GW's entry lacks it).
	sub.StreamStart = sub.Stream
	r.driveUsed = true
	c.emit(Submit{Info: r.infoNow(), RCID: r.rcID, Drive: r.drive, Sub: sub, Why: why})
}

func (c *Core) timeout(r *request) {
	c.cancelDrive(r)
	r.held = &answer{status: messages.Status{RC: messages.CodeTimeout, AC: messages.CodeErr, AI: TextTimeout}}
	c.close(r)
}

func (c *Core) cancelDrive(r *request) {
	if r.driveUsed && r.rcID != "" {
		c.emit(CancelDrive{ID: r.ID, RCID: r.rcID, DriveID: messages.DriveID(r.ID, r.drive)})
	}
}

// close settles the answer: with a log, `answered` is written first (only
// the writer that wins answers), then it is sent and the entry purged.
func (c *Core) close(r *request) {
	r.phase = phClose
	if !r.logged {
		c.finish(r)
		return
	}
	c.write(r, &writeOp{kind: "answered", entry: c.entryOf(r, messages.LogAnswered), expect: r.seq})
}

// finish sends the held answer and forgets the request.
func (c *Core) finish(r *request) {
	a := r.held
	cmd := Answer{Info: r.infoNow(), Accepted: true}
	if a.fwd {
		cmd.Forward, cmd.Chunk, cmd.Header, cmd.Data, cmd.Err = true, a.chunk, a.header, a.data, a.err
		cmd.Relayed = r.chunks != nil || r.stream != nil && !(r.stream.end && len(r.stream.held) == 0)
	} else {
		cmd.Status = a.status
		if cmd.Limit = a.limit; a.limit != "" {
			cmd.RetryAfter = c.cfg.RetryAfter
		}
	}
	c.emit(cmd)
	if a.fwd {
		c.startRelay(r, cmd.Info) // relay.go: the frames of a streamed answer, the chunks of a chunked one
	} else if s := r.stream; s != nil && s.unread && s.agg != "" {
		// Its Agg may wait for the signal: it sends the rest, dropped here,
		// rather than wait until its deadline.
		c.emit(StartStream{Info: cmd.Info, AggID: s.agg, DriveID: s.drive, StreamID: s.id})
	}
	c.stats.Answered++
	if r.logged {
		c.emit(Purge{ID: r.ID, Subject: r.subject})
	}
	c.forget(r)
}

// release lets a request go unanswered at shutdown; its open entry is
// adopted by a peer or the next incarnation.
func (c *Core) release(r *request) {
	c.stats.Released++
	c.emit(Released{Info: r.infoNow()})
	c.forget(r)
}

func (c *Core) entryOf(r *request, st messages.LogState) messages.LogEntry {
	sub := r.Sub
	sub.RequestID = messages.DriveID(r.ID, r.drive)
	e := messages.LogEntry{V: messages.RecoveryVersion, RequestID: r.ID, ClientRequestID: r.ClientID, Caller: r.Caller,
		State: st, GWID: c.cfg.Self, GWStarted: c.cfg.Incarnation, ClientReply: r.Reply, API: r.API, Content: r.Content,
		LogCorr: r.LogCorr, Chunks: r.Chunks, Submission: sub, Drive: r.drive, RCID: r.rcID, RCStarted: r.rcStarted}
	if st != messages.LogOpen {
		e.By = c.cfg.Self
	}
	return e
}

// --- log write results ---

func (c *Core) write(r *request, op *writeOp) {
	r.op = op
	c.emit(WriteLog{ID: r.ID, Subject: r.subject, Entry: op.entry, ExpectSeq: op.expect, Op: op.kind})
}

func (c *Core) written(r *request, seq uint64) {
	op := r.op
	r.op = nil
	r.seq = seq
	switch op.kind {
	case "create":
		r.logged = true
		r.phase = phDrive
	case "refuse":
		// The create never landed and now cannot: the refusal is the answer,
		// and the drive that went out with the create is of no use.
		c.cancelDrive(r)
		if op.again {
			// Unless the settle itself failed first: landing now on an empty
			// subject, it cannot tell a create that never landed from one a
			// peer took over (judging this GW gone), answered, and whose
			// `answered` entry has expired or been purged since. Silence
			// rather than risk a second answer; nothing was promised if
			// nothing landed (the caller's own timeout fires).
			c.emit(Dropped{ID: r.ID, Why: "the request log could not settle whether the request was logged"})
			c.emit(Purge{ID: r.ID, Subject: r.subject})
			c.forget(r)
			return
		}
		r.held = &answer{status: unavailable("The request could not be logged; retry later")}
		r.logged = true // the tombstone is purged with the answer
		c.finish(r)
		return
	case "adopt":
		r.logged = true
		r.phase = phDrive
		c.stats.Adopted++
		c.emit(Adopted{Info: r.infoNow(), FromGW: r.fromGW, Expired: c.now >= r.Deadline})
		// The drive the entry names answers to its GW's subject: taken from
		// another GW, it can no longer answer (that GW's `answered` write
		// would conflict) and nobody else stops it: its RC and Agg would run
		// it to its deadline, an Agg's stream waiting for a start signal from
		// the gone GW holding its partials all along. Its RC stops it as for
		// the owner's own cancel (the same message: RCs of any version take
		// it). Taken from this GW's earlier incarnation, its answer still
		// comes here and may come first: it runs on. The entry is read from
		// the log: its RC id names a subject only if it is a token.
		if r.fromRC != "" && r.fromGW != c.cfg.Self && subjects.Validate("RC id", r.fromRC) == nil {
			c.emit(CancelDrive{ID: r.ID, RCID: r.fromRC, DriveID: messages.DriveID(r.ID, r.fromDrive)})
		}
	case "answered":
		c.finish(r)
		return
	}
	c.advance(r)
}

// ours: the subject holds the very entry op wrote (its acknowledgement was
// lost, or the write was retried after it landed).
func (c *Core) ours(op *writeOp, cur *messages.LogEntry) bool {
	return cur != nil && cur.RequestID == op.entry.RequestID && cur.GWID == c.cfg.Self &&
		cur.GWStarted == c.cfg.Incarnation && cur.State == op.entry.State && cur.Drive == op.entry.Drive
}

func (c *Core) conflict(r *request, cur *messages.LogEntry, seq uint64) {
	op := r.op
	if c.ours(op, cur) {
		c.written(r, seq)
		return
	}
	r.op = nil
	if op.kind == "refuse" && cur != nil && cur.State == messages.LogOpen && cur.GWID == c.cfg.Self &&
		cur.GWStarted == c.cfg.Incarnation && cur.RequestID == r.ID {
		// The create that "failed" had landed: the request is logged after
		// all (an answer or a cancel that came meanwhile is held).
		r.logged, r.seq, r.phase = true, seq, phDrive
		c.advance(r)
		return
	}
	// Another GW adopted it (or answered it): that GW answers, this one
	// stays silent, and the drive it ran is of no use.
	c.cancelDrive(r)
	c.emit(Dropped{ID: r.ID, Why: "request log entry taken over by another GW (" + op.kind + ")"})
	c.forget(r)
}

func (c *Core) failed(r *request) {
	op := r.op
	r.op = nil
	if op.kind == "create" {
		// It may or may not be stored. Settle it with a conditional write of
		// its own: `answered` where nothing is yet. If that lands, the
		// request was never logged and is refused; if it conflicts with the
		// entry, the create had landed and the request goes on. Its drive is
		// running meanwhile: an answer that arrives is held, not dropped.
		refuse := op.entry
		refuse.State, refuse.By = messages.LogAnswered, c.cfg.Self
		c.write(r, &writeOp{kind: "refuse", entry: refuse, expect: 0})
		return
	}
	op.again = true
	r.retry, r.retryAt = op, c.now+c.cfg.LogRetry
	c.arm(r, r.retryAt)
}

// --- answers ---

// maxStreamsPerRequest bounds the chunked transfers buffered for one request
// (a duplicate answer may overlap the first; more is abuse).
const maxStreamsPerRequest = 4

// maxDroppedPerRequest bounds the broken transfers of earlier drives whose
// later chunks a request remembers to drop (request.dropped).
const maxDroppedPerRequest = 4 * maxStreamsPerRequest

// heldFull is the answer to r when what the core holds of answers reached
// MaxHeldBytes: RATE_LIMITED over LimitHeldBytes (the shell adds Sg-Limit
// and Sg-Retry-After), naming the ways the GW passes on as they come that r
// does not take yet.
func (c *Core) heldFull(r *request) *answer {
	ways := ", or take the answer in chunks (request header " + messages.HdrAcceptChunks + ": 1) or as a stream (" +
		messages.HdrAcceptStream + ": 1; getData, sql), which the gateway passes on as they come"
	switch {
	case r.Sub.Stream:
		ways = ""
	case r.Chunks:
		ways = ", or read it as a stream (request header " + messages.HdrAcceptStream + ": 1; getData, sql)"
	}
	return &answer{limit: LimitHeldBytes, status: messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
		"Answer not passed on: gateway %s holds answers' bytes up to its limit %s=%d bytes; come back later%s",
		c.cfg.Self, LimitHeldBytes, c.cfg.MaxHeldBytes, ways)}
}

// dropStreams lets go of r's reassemblers and their bytes.
func (c *Core) dropStreams(r *request) {
	c.heldBytes -= r.streamBytes
	r.streams, r.streamBytes = nil, 0
}

// holdWaiting counts n bytes of a chunk or frame held for r while
// `answered` is written; false, counting nothing, when they would take the
// core past MaxHeldBytes. Without a request log nothing waits: an answer
// goes out as it comes.
func (c *Core) holdWaiting(r *request, n int) bool {
	if !c.cfg.Logged {
		return true
	}
	if c.heldBytes+int64(n) > c.cfg.MaxHeldBytes {
		c.stats.HeldFull++
		c.emit(HeldFull{ID: r.ID})
		return false
	}
	r.waitBytes += int64(n)
	c.heldBytes += int64(n)
	return true
}

// textHeldFull is why an answer passed on as it comes broke at the bound.
const textHeldFull = "the gateway holds answers' bytes up to its limit (" + LimitHeldBytes + ") while the request log's write is under way"

func (c *Core) answerChunk(e AnswerChunk) {
	if messages.IsStreamFrame(e.Header) {
		c.streamFrame(e) // relay.go
		return
	}
	if c.relayChunk(e) { // relay.go
		return
	}
	r := c.reqs[e.ID]
	if r == nil || r.held != nil {
		c.emit(Dropped{ID: e.ID, Why: "answer for a request already answered or not held here"})
		return
	}
	var a *answer
	var kept int64 // the bytes of a reassembled payload
	stream := e.Header.Get(messages.HdrChunkStream)
	whole := e.Header.Get(messages.HdrChunkCount) == "" && e.Header.Get(messages.HdrChunkIndex) == ""
	end := whole && stream != "" && messages.IsChunkEnd(e.Header) // a whole answer names no stream
	if (!whole || end) && slices.Contains(r.dropped, stream) {
		c.emit(Dropped{ID: e.ID, Why: "chunk of an earlier drive's transfer that broke"})
		return
	}
	if whole {
		if end && r.otherDrive(transferHeader(r.streams[stream], e.Header)) {
			c.dropBroken(r, stream, "its Agg ended it")
			return
		}
		a = &answer{fwd: true, header: e.Header, data: e.Data}
	} else {
		if r.streams == nil {
			r.streams = map[string]*messages.Reassembler{}
		}
		ra := r.streams[stream]
		if ra == nil {
			if len(r.streams) >= maxStreamsPerRequest && !r.otherDrive(e.Header) {
				// The current drive's transfer comes first: an earlier
				// drive's that has not completed (its Agg gone, say) makes
				// room, or a request whose slots they fill could only
				// time out.
				if old, ok := r.earliestTransfer(); ok {
					c.dropBroken(r, old, "the current drive's transfer needs its room")
				}
			}
			if len(r.streams) >= maxStreamsPerRequest {
				c.emit(Dropped{ID: e.ID, Why: "too many chunked transfers for one request"})
				return
			}
			ra = messages.NewReassembler(c.cfg.MaxAnswerBytes)
			r.streams[stream] = ra
		}
		before := ra.Held()
		done, err := ra.Add(e.Header, e.Data)
		held := ra.Held() - before
		r.streamBytes += held
		c.heldBytes += held
		if c.heldBytes > c.cfg.MaxHeldBytes && r.otherDrive(transferHeader(ra, e.Header)) {
			c.dropBroken(r, stream, "its bytes would take the gateway past its limit "+LimitHeldBytes)
			return
		}
		if c.heldBytes > c.cfg.MaxHeldBytes {
			// What this chunk took passes the bound: its answer ends, and
			// lets go of every byte it held. One that passes it alone could
			// never come: too large, not to come back with.
			c.stats.HeldFull++
			c.emit(HeldFull{ID: r.ID})
			r.held = c.heldFull(r)
			if r.streamBytes > c.cfg.MaxHeldBytes {
				r.held = &answer{fwd: true, header: e.Header, err: fmt.Errorf("%w: the answer's chunks alone take %d bytes, above the gateway's limit of %d for answers it holds (%s)",
					messages.ErrTooLarge, r.streamBytes, c.cfg.MaxHeldBytes, LimitHeldBytes)}
			}
			c.dropStreams(r)
			c.advance(r)
			return
		}
		switch {
		case err != nil && r.otherDrive(transferHeader(ra, e.Header)):
			c.dropBroken(r, stream, err.Error())
			return
		case err != nil:
			a = &answer{fwd: true, header: ra.Header(), err: err}
		case done:
			payload, err := ra.Payload()
			a = &answer{fwd: true, header: ra.Header(), data: payload, err: err}
			// The payload is the reassembler's room: it waits for
			// `answered` counted, not let go with the streams below.
			kept = ra.Held()
		default:
			return
		}
	}
	c.dropStreams(r)
	r.waitBytes += kept
	c.heldBytes += kept
	r.held = a
	// The drive answered: nothing to cancel.
	c.advance(r)
}

// otherDrive reports whether h, the headers a transfer began with, name an
// earlier drive of r than its current one (their Sg-Request-Id), still
// answering after a re-drive or an adoption. Such a transfer that breaks is
// dropped, not answered (dropBroken). A transfer whose drive cannot be told,
// or that names a drive not yet made, is taken for the current drive's.
func (r *request) otherDrive(h nats.Header) bool {
	n, ok := driveOf(r.ID, h.Get(messages.HdrRequestID))
	return ok && n < r.drive // a drive not made yet is none of them: the current drive's
}

// earliestTransfer is the chunked transfer gathered here of r's earliest
// drive before the current one (ties: the least stream id, so that the
// choice does not hang on a map's order); false when every one is the
// current drive's, or cannot be told.
func (r *request) earliestTransfer() (string, bool) {
	best, bestDrive, found := "", uint32(0), false
	for stream, ra := range r.streams {
		h := ra.Header()
		if h == nil {
			continue
		}
		n, ok := driveOf(r.ID, h.Get(messages.HdrRequestID))
		if !ok || n >= r.drive { // not an earlier drive's (otherDrive)
			continue
		}
		if !found || n < bestDrive || (n == bestDrive && stream < best) {
			best, bestDrive, found = stream, n, true
		}
	}
	return best, found
}

// transferHeader is the headers transfer ra began with, or h, those of the
// message at hand, when it has none (its first message broke it).
func transferHeader(ra *messages.Reassembler, h nats.Header) nats.Header {
	if ra != nil && ra.Header() != nil {
		return ra.Header()
	}
	return h
}

// dropBroken lets go of chunked transfer stream of a drive of r other than
// its current one, which broke (why) and so can never answer: its bytes,
// and its later chunks (r.dropped). It is not the request's answer while
// the current drive may still answer whole; a request no drive answers
// ends at its deadline (advanceDrive).
func (c *Core) dropBroken(r *request, stream, why string) {
	if ra := r.streams[stream]; ra != nil {
		held := ra.Held()
		r.streamBytes -= held
		c.heldBytes -= held
		delete(r.streams, stream)
	}
	if len(r.dropped) >= maxDroppedPerRequest {
		r.dropped = r.dropped[1:]
	}
	r.dropped = append(r.dropped, stream)
	c.emit(Dropped{ID: r.ID, Why: "an earlier drive's transfer let go (" + why + "); the current drive may still answer"})
}

// --- adoption ---

func (c *Core) adopt(e Adopt) {
	en := e.Entry
	if c.stopping || en.State != messages.LogOpen || c.reqs[en.RequestID] != nil {
		return
	}
	if c.relays[en.RequestID] != nil {
		// This GW answered it and passes the rest on: the entry read as open
		// was read before the `answered` write landed.
		c.emit(Dropped{ID: en.RequestID, Why: "adoption of a request whose answer this GW is relaying"})
		return
	}
	req := Request{ID: en.RequestID, ClientID: en.ClientRequestID, Caller: en.Caller, Reply: en.ClientReply, API: en.API,
		Content: en.Content, LogCorr: en.LogCorr, Chunks: en.Chunks, Sub: en.Submission, Received: en.Submission.ReceivedAt, Deadline: en.Submission.Deadline}
	if req.ClientID == "" {
		req.ClientID = req.ID
	}
	// Later drives answer to this GW.
	req.Sub.ReplyTo = c.cfg.AnswerSubject(c.cfg.Self, req.ID)
	r := &request{Request: req, phase: phAdopt, drive: en.Drive + 1, subject: e.Subject, fromGW: en.GWID, why: "adopted",
		fromRC: en.RCID, fromDrive: en.Drive}
	c.hold(r)
	// One conditional write takes it over: the entry stays on its subject,
	// now naming this GW, with the next drive's number reserved. Either it
	// lands (this GW answers) or it conflicts (the owner answered, or
	// another GW was faster): no moment leaves the request to nobody.
	c.write(r, &writeOp{kind: "adopt", entry: c.entryOf(r, messages.LogOpen), expect: e.Seq})
}

// --- cancellation ---

var cancelledStatus = messages.Status{RC: messages.CodeCancelled, AC: messages.CodeErr, AI: TextCancelled}

func (c *Core) cancel(e Cancel) {
	var hit, late int
	for _, r := range c.sorted() {
		if r.Caller != e.Caller || r.ClientID != e.ClientID {
			continue
		}
		if r.held != nil {
			late++
			continue
		}
		hit++
		c.cancelDrive(r)
		r.cancelled = true
		r.held = &answer{status: cancelledStatus}
		c.advance(r)
	}
	switch {
	case hit > 0:
		c.emit(AnswerCancel{Reply: e.Reply, ClientID: e.ClientID, Status: messages.StatusOK})
	case late > 0:
		c.emit(AnswerCancel{Reply: e.Reply, ClientID: e.ClientID, Status: messages.Errorf(messages.CodeErr, messages.CodeErr,
			"Request %s is already being answered; nothing to cancel", e.ClientID)})
	}
	// Not held here: another GW may hold it and answers the cancel.
}
