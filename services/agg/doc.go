// Package agg is the aggregator: it merges the partial results of one request, sent by
// the DAPs, into the answer, and replies once to the caller (the GW).
//
// Per request the Agg
//  1. buffers partial results (subjects.AggPartial(ID)), chunked or not, whether or not
//     the RC's expectation has arrived yet, within PartialTTL and MaxAnswerBytes;
//  2. applies the RC's expectations (subjects.AggExpect(ID)) in Seq order: Expect adds
//     portion attempts, Supersede drops earlier attempts (and their late partials),
//     Sealed says the set is whole for now (each expectation carries it: the RC tells of
//     portions as it dispatches them and unseals on a requeue), Cancel drops everything
//     (the RC answers itself),
//     as does the RC's cancel on subjects.AggCancel(ID) (empty body, the request id in
//     Sg-Request-Id);
//  3. once sealed and every expected partial is present, answers the merge; as soon as
//     an expected partial has a non-OK status, answers that status (the DAP's rc/ac/ai:
//     a failed portion fails the request, so the others need not be awaited; if
//     several have failed by then, the first in expectation order);
//  4. replies on ReplyTo with a messages.Response envelope in the requested Content,
//     naming the expectation's AnswerID (the caller's id, so the GW has nothing to
//     rewrite), its own payload wrapped without a copy or a second validation
//     (Response.EncodeOwn), routing and rc/ac/ai in headers, in chunks when above NATS's
//     max payload (leaving messages.RelayRoom in each for the GW, which passes them on
//     as they come), and then tells the RC (AggDone). Never after the deadline: the RC
//     answers the timeout then.
//     The answer's notice waits up to Config.DoneDelay (defaults.AggDoneDelay, 2 ms)
//     for others to the same RC and goes with them in one AggDone (done.go): the RC
//     only forgets the request then. A timed-out notice goes at once.
//
// Partials in windows (live.go): a DAP sends a large row partial as windows under the
// Agg's credit (messages.PartialCredit on subjects.DAPCredit). A stream reader's rows
// without sortCols are merged live: once sealed and every expected portion has its first
// window, the Agg streams the k-way merge, granting each portion a window for each it
// has merged, and a limit stops the DAPs. Once that stream has begun its frames cannot
// be taken back: a portion that then fails or is superseded, or a new one expected, ends
// it with an error frame (the DAP's status, or ERR naming the portion; TIMEOUT at the
// deadline); before it begins, a superseded attempt's windows are dropped as today.
// Other requests gather the windows, each a partial of the merge. Windows without
// credit, out of order or from another DAP fail the request (ERR) and count as
// malformed.
//
// An expectation that does not decode or validate is refused (refuse.go,
// messages.Refusal) to the RC its headers name, which answers BAD_REQUEST at
// once; a partial that does not, to the RC of its request's expectation, which
// answers INTERNAL. The RC judges whether the refusal is this Agg's to make.
//
// Answer streams the GW paces (start.go; AggExpectation.StreamStart): the first
// messages.StreamStartFrames frames go at once, the rest once the GW's start signal
// (subjects.AggStart) came, so that the GW holds few frames while it writes
// `answered`. The wait ends with the signal, the RC's cancel, the Agg stopping or
// the deadline.
//
// Aggregates (groupBy, agg; sql's GROUP BY) are folded as they come (fold.go):
// each partial is decoded and folded into the request's running fold once it
// counts (its ref expected: as it arrives, or as its expectation does), never
// one not (yet) expected, superseded or failed; the answer folds only what
// was not folded yet (usually the last partial, which completed it) and
// takes the fold's result. Until the answer any partial held may be
// superseded (a RETRY restarts its label set's attempt whole, portions that
// answered OK included; a whole SQL retry, every label set; a lost DAP, its
// running portions), and a fold cannot give min, max, first or last back:
// the partials' bytes stay held, and counted, as before, and a supersede of
// a folded ref starts the fold again: on the request's first such reset from
// the partials still counted (within the bounds below), on later ones from
// the partials that come after it, the answer folding the rest. The fold is order-free to the bit (merge.TestAggregateFoldIsOrderFree),
// so a fold rebuilt, or finished at the answer, is the fold of exactly the
// answered partials, each once (TestRetryAfterFoldsCountsSurvivorsOnce). A
// partial that does not decode or fit makes the answer merge them all as
// before, in expectation order, for the same status. The running folds are
// bounded, not counted: partials are folded as they come only while the
// bytes held for all requests stay within MaxHeldBytes/16 (early.go's bound
// for windows decoded as they come); past it the answer folds them.
//
// Answers by API:
//
//	getData  the merged messages.Table: msgpack columnar, or JSON an array of row objects
//	ping     a map from DAP id to true, one entry per DAP reached ({"dap-eu-rdb-0": true});
//	         a DAP that answered a non-true payload reads false
//	other    NOT_SUPPORTED: the Agg does not know how to merge it
//
// The Agg beats on subjects.AggHeartbeat(ID) every Config.Heartbeat (and once more,
// Stopping, when it stops), so that RCs give work only to live Aggs and drive the requests
// of a dead one again elsewhere. It holds at most MaxRequestBytes of partials per request
// (over it: TOO_LARGE, Sg-Limit agg_request_bytes) and MaxHeldBytes for all requests
// (over it the request that would pass it is answered RATE_LIMITED, Sg-Limit
// agg_held_bytes, with Sg-Retry-After).
//
// Each request is answered at most once: answered (and cancelled, expired) request ids
// are remembered until PartialTTL after their deadline, and everything about them is
// dropped on arrival.
package agg
