// Package core is the resource coordinator's scheduler: a synchronous,
// deterministic state machine with no NATS, no goroutines, no clock and no
// randomness. It implements the seed's queueing, dequeueing, retries and
// timeouts (shared/seeds/sg-queueing-retries-timeouts*.txt).
//
// A request is cut into label sets (and, for time-partitioned tables, time
// ranges). Each piece that a feasible DAP can take is dispatched at once;
// the rest is queued, and dequeued oldest first when a DAP registers,
// changes status or vintage, or completes a portion. A label set's
// reference vintage is locked at its first dispatch. RETRY answers and
// vintage changes retry a whole label set, up to Config.MaxRetry. Deadlines
// produce the seed's TIMEOUT message, built from the facts the scheduler
// holds.
//
// # The caller's contract
//
//  1. Own the Core from one goroutine. Nothing in it is safe for
//     concurrent use, and nothing in it blocks.
//  2. Turn every input into an Event carrying the time you observed it
//     (Unix nanoseconds, non-decreasing; an earlier time is treated as the
//     latest seen) and pass it to Step.
//  3. Carry out the returned commands in order before the next Step
//     (*Dispatch and *AggTrack point into storage the next Step reuses):
//     Dispatch (to the DAP, or through ViaRC), AggTrack (to the Agg, before
//     the Dispatch it concerns: the portions to expect and to forget, and
//     whether the set is sealed, so the Agg answers on the last partial;
//     see track.go), AggExpect and AggFail (to the Agg), Reply (to the caller: rc/ac from the ReplyKind, ai = Text),
//     QueryPeerStatus, ReportPeerStatus, ForwardCompletion and
//     ForwardRefusal (to peer RCs), CancelDAP, CancelPeer and CancelAgg (tell a DAP, a secondary
//     RC, the Agg to stop work on a request the RC has answered);
//     AggChanged says a request moved to another Agg (its expectations start
//     again there); RetryNoted and TimeoutIncomplete are for logs and
//     metrics. The slice is reused
//     by the next Step.
//  4. After each Step, call NextDeadline and arm a timer for it; when it
//     fires, Step a Tick. This answers timeouts on time instead of on the
//     next periodic check. Keep a periodic Tick as well (SG_RC_TIMER).
//  5. Read Stats for metrics whenever you like between Steps.
//
// The canonical loop:
//
//	for {
//		var ev core.Event
//		select {
//		case <-ctx.Done():
//			return
//		case m := <-inbox:
//			ev = toEvent(m, now())
//		case <-timer.C:
//			ev = core.Tick{At: now()}
//		}
//		for _, cmd := range c.Step(ev) {
//			carryOut(cmd)
//		}
//		if at, ok := c.NextDeadline(); ok {
//			timer.Reset(time.Until(time.Unix(0, at)))
//		}
//	}
//
// # Choices where the seed is silent or contradicts itself
//
//   - A request is planned over the label sets of the DAPs in the fleet and
//     over those whose DAPs all left within Config.LabelSetRetention
//     (default 10 min, SG_RC_LABEL_SET_RETENTION; past.go). The seed queues
//     a portion no DAP can serve ("No DAP covers labels/time range", an
//     empty dap list) and moves it out when a DAP that can serve it becomes
//     available; so a label set whose DAPs just left (a restart, a rolling
//     upgrade, heartbeats missed under load) is waited for, not left out of
//     an OK answer or refused "No DAP has label set". The seed does not say
//     how long: the retention is ten times the default request timeout,
//     longer than a DAP's restart, and bounded, so that a label set really
//     decommissioned stops holding every request that selects it to its
//     deadline ten minutes after its last DAP left; requests planned before
//     then still wait for it to their deadline. A clean shutdown counts as a
//     loss like silence (a rolling upgrade shuts down cleanly too; the seed
//     has no decommission notice). Per table the core keeps the kind and,
//     per label set, the scope (assembly, tier) of each DAP that left, so a
//     scoped request waits for a lost scope of a label set that lives; a
//     DAP of that scope registering takes the entry back. A restarted RC
//     replays its DAP state stream (services/rc, fleetstate.go): a
//     registration and a loss are stepped at their stored times, so a loss
//     within the retention is remembered from when it happened.
//   - Retries are counted per request (all label sets together) against
//     Config.MaxRetry; a lost DAP's portions are requeued without counting
//     as a retry.
//   - The vintage retry rule applies to the DAPs that could serve the queued
//     entry (and, as written, to all the label set's DAPs); see
//     groupChanged for the reading of the seed's example.
//   - An unsharded table has no label set; the DAPs that serve it form one
//     group for the up-to-date check and the vintage lock.
//   - A request that reaches the core at or after its deadline is answered
//     at once with status "received too late" and afterDeadline (how late):
//     the seed keeps that status for secondaries, but "unknown" from a
//     primary is, in its words, a bug. AggTimedOut (the Agg's own execution
//     timed out) and a DAP's timeout report time the request out at once;
//     a DAP that reported its timeout is shown as executing. A secondary
//     whose DAP failed reports "inactive". TimeoutIncomplete carries the
//     seed's debug line when secondaries stay silent.
//   - Refused (a DAP or the Agg could not decode or validate a message of
//     the request; the seed is silent) answers the request at once,
//     BAD_REQUEST or INTERNAL with the refusing service in ai, but only when
//     it names what this core sent: the request's Agg, or the DAP a live
//     portion went to at that attempt. Any other refusal is dropped and
//     counted (RefusalNoted); a relayed portion's refusal is not acted on.
//   - The status the seed lists as "pending aggregation" (its example says
//     "pending aggregating") is rendered "pending aggregation".
//   - Timestamps in messages are RFC 3339 with nanoseconds, UTC, and
//     -inf/+inf for unbounded ends; lists are [a,b]; labels are {k:v}.
//   - The multi-RC wait lasts MultiRCMaxWait timer periods (TickEvery) from
//     the deadline, so a timeout with silent secondaries is answered that
//     much after the deadline; without secondaries it is answered at it.
//   - Whenever the RC answers a request itself (timeout, cancel, failure)
//     the DAPs still running its portions (any attempt), the secondaries
//     relaying some and the Agg are told to stop. A DAP's slot is freed
//     when it answers the portion, not when it is told, so a DAP never
//     holds more portions than its concurrency.
//   - Aggs are tracked like DAPs (AggUp, AggLost from the shell's
//     heartbeat watch). A request gets an alive Agg in turn (or keeps the
//     one it names while that one is alive). When its Agg is lost, every
//     label set restarts on another Agg, not counted as a retry, and its
//     own DAPs are told to stop the portions that worked for the dead Agg
//     (CancelDAP with Portion), so the new attempt need not wait; with none
//     left it is answered "Agg <id> was lost and no other Agg is connected"
//     (NO_RESOURCES) at once.
//   - Queue limits (Config.MaxQueued, MaxQueuedPerCaller by Request.Caller)
//     are checked at admission, after the new request's first placement: if
//     it leaves items queued and the queue (or its caller's share) is then
//     over the limit, it is answered ReplyRateLimited (Reply.Limit, and
//     Reply.RetryAfter from limits.RetryAfter at the measured drain rate) and what was dispatched of
//     it is stopped. An admitted request is never dropped for a limit: its
//     requeues may pass it for a while. A DAP's refusal over its own queue
//     limit (OutcomeRefused) answers the request the same way.
//   - RequestCancelled at or after the deadline is a timeout (the seed's
//     message), and one during the multi-RC timeout wait lets the timeout
//     finish. A cancel for an unknown request does nothing.
//   - Room left for later: Request.Assembly/Tier (scope), DAPPaused
//     (rate-limit pauses), Stats; fairness is to come. Position reports a request's place in the queue
//     and the measured drain rate and execution time of the DAPs that can
//     serve it (position.go), for the GW's async Retry-After.
package core
