// Package gw is the service gateway: it owns a client's request from arrival
// to reply (DESIGN section 1).
//
// The request state machine is services/gw/core, a pure core (its doc.go
// has the caller's contract and what is guaranteed); this package is its
// NATS shell: one goroutine (shell.go, loop) alone touches the core, fed by
// the NATS callbacks, the request log's acknowledgements (it publishes the
// log's writes itself), the log's workers (read-backs, purges) and the sweeper.
//
// For every request the GW:
//  1. receives it on a micro endpoint (one per API in subjects.APIs, group
//     subjects.GWAPIGroup) and drops it unanswered unless its reply subject
//     is a client inbox (Config.AllowedReplyPrefixes; never an sg or $
//     subject);
//  2. decodes and checks it in the handler (messages.DecodeRequest, then the
//     API's own arguments, Config.MaxRequestBytes), answering BAD_REQUEST,
//     UNKNOWN_API, NOT_SUPPORTED or TOO_LARGE with a clear text when it
//     cannot go on, and gives it an id of its own (a nuid): the client's
//     Sg-Request-Id is only a label, echoed on the answer;
//  3. hands it to the core, which admits it (RATE_LIMITED over
//     Config.MaxInFlight or Config.MaxInFlightPerCaller, with Sg-Limit and
//     Sg-Retry-After) and picks an RC by scope from the RCs' announcements
//     (seed: scope and assemblies), or answers NO_RESOURCES "No resources
//     connected";
//  4. with Config.RequestLog, writes the request to the request log in
//     JetStream (requestlog.go) before anything else happens to it;
//  5. submits a messages.RCSubmission to the RC, with the reply subject
//     subjects.GWAnswer(gw, request), the deadline, Sg-Client-Request-Id and
//     Sg-Caller, and the caller's arguments as they were sent: a msgpack
//     caller's in Args, a JSON caller's bytes in ArgsJSON (a v2 submission,
//     messages/args.go). The GW decodes them once, to check them and read the
//     scope, and never re-encodes them: the RC, the DAPs and the Agg each
//     decode them once more, with the same decoder, in their own encoding; if that RC restarts, drains or is dead (Config.DeadAfter),
//     drives the request again on another, under a new drive id
//     (messages.DriveID);
//  6. forwards the first answer that arrives there (one message or chunks)
//     to the client, bytes and headers unchanged but for the client's id
//     (the submission's AnswerID: the Agg writes it in the envelope, so a
//     chunked answer to a request that said Sg-Accept-Chunks: 1 is passed
//     on chunk by chunk as it comes, checked in order, its last chunk only
//     once the whole checked out (core/relay.go); any other chunked answer
//     is reassembled first), chunked again when it is above the client's max
//     payload if the request said Sg-Accept-Chunks: 1, else replaced by one
//     TOO_LARGE naming the
//     size and how to get the answer, with Config.AnswerStore after writing
//     it to that object store, whose bucket and key the error names
//     (answerstore.go; never a cut document); later answers
//     are dropped; with a request log, only after writing `answered`, so
//     that a GW that adopted the request meanwhile answers instead, never
//     both;
//  7. if none arrives by deadline + Config.TimeoutMargin, answers TIMEOUT
//     with "Request was timed out by the service gateway" (seed: the GW
//     times out a request only when the RC has failed to do so) and tells
//     the RC to stop the drive; a client's cancel (sg.api.cancel) does the
//     same with CANCELLED.
//
// A request with opts.async (and Config.Jobs) is not answered with its
// result: jobs.go records a job in JetStream, answers ACCEPTED with the
// job's id and the seed's dynamic Retry-After (services/retryafter on the
// position and drain rate the RC measures, asked on subjects.RCPosition),
// hands the request it decoded at submission to the path above (never
// decoded again, its arguments never re-encoded; the answer comes back to an
// inbox of its own, as a client's) and keeps the answer; polls
// (subjects.GWJob) are answered from the store by any GW.
//
// GWs heartbeat to each other; the open requests of a GW that stops,
// restarts or dies are adopted from the request log by a peer or by its own
// next incarnation (recovery.go), which drives them again or answers the
// timeout. README.md (Deployment, durability and recovery) has the whole
// story, what is guaranteed and what is not, and the durability settings.
//
// # The messages of one small request
//
// A getData that one DAP answers in one partial costs these NATS messages
// end to end (test/messages_per_request_test.go counts them, by subject):
//
//	#  from -> to    subject                     critical path  why
//	1  client -> GW  sg.api.getData              yes            the request
//	2  GW -> RC      sg.rc.<rc>.submit           yes            the drive
//	3  RC -> DAP     sg.dap.<dap>.portion        yes            the portion
//	4  RC -> Agg     sg.agg.<agg>.expect         beside 3-5     what makes the answer (Seq 1, sealed)
//	5  DAP -> Agg    sg.agg.<agg>.partial        yes            the partial result
//	6  DAP -> RC     sg.rc.<rc>.completion       no             frees the DAP's slot; RETRY, vintage
//	7  Agg -> GW     sg.gw.<gw>.answer.<id>      yes            the answer
//	8  GW -> client  the caller's inbox          yes            the reply
//	9  Agg -> RC     sg.rc.<rc>.aggdone          no             the RC forgets the request; one
//	                                                            message for the requests answered
//	                                                            within defaults.AggDoneDelay (0.1-0.7
//	                                                            per request with one caller)
//
// With the request log on, two JetStream writes and their acknowledgements
// more: the entry (sg.log.req.<gw>.<id>, expecting no earlier record),
// published just after 2, its acknowledgement beside 3-7; and `answered`
// (expecting the entry's sequence, with a TTL) between 7 and 8, with its
// acknowledgement: the only one on the critical path, and what makes the
// answer exactly-once against an adopter. Heartbeats and announcements do
// not come with requests. The floor is six one-way hops (1, 2, 3, 5, 7, 8).
package gw
