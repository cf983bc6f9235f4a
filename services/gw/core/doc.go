// Package core is the GW's request state machine: synchronous and
// deterministic, with no NATS, no goroutines, no clock and no randomness.
// It owns the GW's promise: every request it admits gets exactly one answer
// (DESIGN section 1; README "Deployment, durability and recovery").
//
// A request is admitted (or refused over a limit, or while stopping), waits
// for an RC early after start or while its scope's RCs restart, is written to
// the request log, submitted, driven again under a new drive id when its RC
// restarts, drains or dies, and answered once: with the first answer that
// arrives for any of its drives, with TIMEOUT at deadline + TimeoutMargin,
// or with CANCELLED when its caller cancels it. An earlier drive's transfer
// that breaks before it decided the answer is dropped, not answered. With a
// request log, the `answered` state is written with a condition before the
// answer is sent, and a GW that adopts an orphaned request takes it over
// with one conditional write: of the GWs that might answer, exactly one wins.
//
// # The caller's contract
//
//  1. Own the Core from one goroutine. Nothing in it is safe for concurrent
//     use, and nothing in it blocks.
//  2. Turn every input into an Event carrying the time you observed it (unix
//     nanoseconds; an earlier time than one already seen counts as that
//     one) and pass it to Step: client requests you decoded and checked
//     (Arrived), RC announcements (RCAnnounced), the result of every
//     WriteLog (LogWritten, LogConflict with the subject's current entry
//     read back, or LogFailed), a failed Submit (SubmitFailed), a message
//     of an answer passed on as it comes that could not be published
//     (RelayFailed: the core ends that answer), every
//     message on a request's answer subject (AnswerChunk), open log entries
//     of GWs that are gone (Adopt), cancels (Cancel), and Stop then Abort
//     when you stop.
//  3. Carry out the returned commands in order before the next Step:
//     WriteLog (conditional on ExpectSeq; report its result as an event,
//     possibly much later: the core has at most one write per request under
//     way), Purge, Submit, CancelDrive, Answer and AnswerCancel (publish to
//     the reply subject: the core checked nothing about it, the shell
//     admits only client inboxes), Relay (the next message of an answer
//     passed on as it comes, to the same subject), StartStream (to the
//     Agg's start subject: the rest of an answer stream), and Released,
//     Dropped, Adopted, Malformed for logs and metrics. The slice is reused by the
//     next Step.
//  4. After each Step, arm a timer for NextDeadline (the requests' timers
//     and the relays' deadlines) and Step a Tick when it fires; Tick also
//     periodically (the RC announcement period), so silent RCs are noticed.
//     Measure each Tick's lateness past the announcement period since the
//     last Tick (stall.Watch) and give it as Tick.Late: the core credits it
//     to the RCs (the GW's own stall is not their silence) and does not
//     measure it itself.
//  5. To stop: Step Stop (no more admissions; requests not yet logged are
//     refused UNAVAILABLE), let requests finish for a grace period, Step
//     Abort (without a log the rest are answered UNAVAILABLE; with one they
//     are Released for adoption once no write of theirs is under way), and
//     keep stepping results until Idle. Publish nothing after that.
//
// The canonical loop:
//
//	for !(stopped && c.Idle()) {
//		var ev core.Event
//		select {
//		case in := <-inputs:
//			ev = in.event(now())
//		case <-timer.C:
//			t := time.Now()
//			ev = core.Tick{At: t.UnixNano(), Late: int64(watch.Wake(t))}
//		}
//		for _, cmd := range c.Step(ev) {
//			carryOut(cmd)
//		}
//		if at, ok := c.NextDeadline(); ok {
//			timer.Reset(time.Until(time.Unix(0, at)))
//		}
//	}
//
// # What is guaranteed, and the choices made
//
//   - At most one answer per request, under any ordering of crashes,
//     restarts, log write failures and conflicts: an answer is sent only
//     after the `answered` write landed (acknowledged, or read back as ours
//     after a lost acknowledgement).
//   - Exactly one answer for every request whose log entry was written,
//     unless a GW dies after its `answered` write landed and before it
//     published the answer (one publish), or the request log stays
//     unwritable for the request's whole life (then nobody answers, rather
//     than risk two answers; the caller's own timeout fires).
//   - A failed `answered` write is written again every LogRetry; the answer
//     waits for it. A failed create is settled with a conditional `answered`
//     write where nothing is yet: if it lands the request is refused
//     UNAVAILABLE (never logged); if it conflicts with the entry, the create
//     had landed and the request goes on. A settle that failed in turn is
//     written again, but refuses nothing when it lands: an empty subject may
//     be one a peer adopted, answered and whose `answered` entry expired.
//   - Adoption is one conditional write on the entry's own subject (the
//     entry now names the adopter, with the next drive number reserved):
//     there is no moment when the old owner has let go and the new one has
//     not taken over. Later drives answer to the adopter's answer subject.
//   - A re-drive's number is written to the log before it is submitted, so
//     no two drives of a request ever share an id at the RC, DAPs or Agg.
//     The first drive (number 0) goes out with the create: the log's round
//     trip is off the critical path, an adopter always takes the entry's
//     drive + 1, and an answer that arrives before the create lands is held
//     until it does (a create that cannot land refuses the request and
//     cancels the drive).
//   - With CreateAfter, the create waits that long after the first drive:
//     a request answered or cancelled sooner is answered with no log write
//     (no entry, so no adopter: this GW's answer is the only one), and a GW
//     that dies sooner leaves it unanswered, as one that died before its
//     create landed always did. A GW that stops writes its deferred entries
//     at once, for a peer to adopt what it leaves open.
//   - A re-drive (or an adoption) keeps an earlier drive's chunked answer
//     under way: it may still complete first, and then answers. If it
//     breaks instead (a chunk forged or of the wrong size, a checksum that
//     fails, a chunk end, which no Agg sends but is read defensively, or
//     the GW's held bytes past MaxHeldBytes as it comes), or an earlier
//     drive's answer stream's first frame does not read, it is dropped
//     with its bytes (Dropped; its Agg gets no StartStream), not
//     answered: the current drive may still answer whole, and a request no
//     drive answers is answered TIMEOUT at its deadline (+ TimeoutMargin
//     while a drive runs). A chunk that is lost breaks nothing: its
//     transfer stays incomplete until a drive answers or the request ends,
//     or until the current drive's transfer needs its room (a request
//     gathers at most 4 at once: the earliest drive's is let go first).
//     A break of the current drive's is its answer. A drive is told by its
//     answer's Sg-Request-Id; one that names none of the request's drives
//     made so far counts as the current drive's. An answer passed on as it
//     comes is decided by its first message, whatever its drive: a break
//     after that ends it with an error end.
//   - Per-caller and per-GW limits count requests held, adopted ones too;
//     adoption is never refused.
//   - A cancel matches the requests of that caller (the cancel's reply
//     inbox prefix) with that client id, all of them if several; a cancel
//     for requests this GW does not hold is not answered here (another GW
//     may hold them).
//   - The GW's timeout and a cancel tell the drive's RC to stop
//     (CancelDrive); a taken-over request's drive is cancelled too, by
//     the owner that finds it taken and by the adopter once its adoption
//     lands (the drive its entry names: nobody else would stop it). The
//     deadline itself sends nothing: at the deadline the RC answers the
//     seed's timeout message itself, which a cancel would cut short.
//   - Peer GWs are judged by the shell (their heartbeats, stops, restarts,
//     silence): it feeds the open entries of the gone ones as Adopt. A wrong
//     judgement costs a re-drive, never a second answer.
package core
