// Package gw is the service gateway: it owns a client's request from arrival
// to reply (DESIGN section 1).
//
// For every request the GW:
//  1. receives it on a micro endpoint (one per API in subjects.APIs, group
//     subjects.GWAPIGroup), and hands it to a goroutine at once, bounded by
//     Config.MaxInFlight, so the micro handler never blocks;
//  2. decodes and checks it (messages.DecodeRequest, then the API's own
//     arguments), answering BAD_REQUEST, UNKNOWN_API, NOT_SUPPORTED or
//     TOO_LARGE with a clear text when it cannot go on;
//  3. picks an RC by scope from the RCs' announcements (seed: scope and
//     assemblies): the least outstanding work among the eligible ones, or
//     answers NO_RESOURCES "No resources connected";
//  4. with Config.RequestLog, writes the request to the request log in
//     JetStream (requestlog.go) before anything else happens to it;
//  5. submits a messages.RCSubmission to the RC, with the reply subject
//     subjects.GWAnswer(gw, request) and the deadline; if that RC restarts,
//     drains or is dead (Config.DeadAfter), drives the request again on
//     another, under a new drive id (messages.DriveID);
//  6. forwards the first answer that arrives there (one message or chunks)
//     to the client, bytes and headers unchanged, chunked again when it is
//     above the client's max payload; later answers for the same request are
//     dropped; with a request log, only after closing the entry, so that
//     a GW that adopted the request meanwhile answers instead, never both;
//  7. if none arrives by deadline + Config.TimeoutMargin, answers TIMEOUT
//     with "Request was timed out by the service gateway" (seed: the GW
//     times out a request only when the RC has failed to do so).
//
// GWs heartbeat to each other; the open requests of a GW that stops,
// restarts or dies are adopted from the request log by a peer or by its own
// next incarnation (recovery.go), which drives them again or answers the
// timeout. README.md (Deployment, durability and recovery) has the whole
// story and the durability settings.
package gw
