// Package dap is the runtime of a data access process (DAP): one shard of the data (a
// label set, a tier and a temporal purview) served over NATS.
//
// A DAP
//  1. registers with the RCs (subjects.DAPRegister) when it starts, and again whenever an
//     RC it has not seen announces itself (or restarts), so an RC started later learns of it;
//  2. sends a heartbeat every Config.Heartbeat, and status and vintage updates when its
//     availability, purview or reference vintage change (SetAvailable, SetPurview,
//     SetVintage);
//  3. takes portions on subjects.DAPPortion(ID): a portion whose purview version or
//     reference vintage differs from the DAP's own is answered RETRY without running
//     (seed: Retries), and so is a time portion whose range is not inside the DAP's
//     purview (placed on a stale purview); the others run on the Source, at most
//     Config.Concurrency at once, in arrival order, until the dispatch deadline. A portion
//     runs on the source that went with the versions it was admitted at: Apply changes
//     availability, purview, versions and source in one step (package live's rolls);
//  4. sends the partial result to the Agg (chunked when above NATS's max payload) and a
//     completion to the RC, for every dispatch: the completion is what frees its slot.
//     A row partial above Config.PartialWindow from a PartialSource (EngineSource,
//     package live's hdb source, a RemoteSource over either) goes as windows,
//     encoded one at a time, under the Agg's credit (subjects.DAPCredit(ID), window.go),
//     the completion after the last (or after the Agg's Stop);
//  5. on the RC's cancel (subjects.DAPCancel(ID), empty body, the request id in
//     Sg-Request-Id) stops the request's running portions through their context (the
//     Source looks at it between batches of rows: the engine every engine.BatchRows
//     rows, the Parquet reader every page), drops its queued ones, and answers each with
//     an ERR completion, which frees the slot at the RC; a dispatch that arrives after
//     its request's cancel is answered without running. A cancel that also carries
//     Sg-Portion-Id stops that portion only (it worked for an Agg that died; the request
//     goes on). The deadline stops a portion the same way, answered TIMEOUT;
//  6. holds at most Config.MaxQueue dispatches waiting for a slot: one more is answered
//     RATE_LIMITED (an error partial and completion naming the limit dap_queue), and the
//     RC answers the caller RATE_LIMITED with Sg-Limit and Sg-Retry-After;
//  7. on shutdown says DAPLost{Reason: "shutdown"} so the RC requeues its portions now
//     rather than after missed heartbeats.
//
// Error codes (rc; ac is always ERR, as in the seed's rc=TIMEOUT ac=ERR):
//
//	BAD_REQUEST    arguments that do not decode or validate, unknown table or column,
//	               a filter value of the wrong type, an aggregation or sort that does
//	               not apply, a malformed dispatch (refused to the RC its headers
//	               name, which answers at once: messages.Refusal)
//	NOT_SUPPORTED  an API the Source does not implement
//	TIMEOUT        the dispatch deadline passed before the Source finished
//	ERR            anything else
//
// A Source may choose its own code by returning a *CodeError.
package dap
