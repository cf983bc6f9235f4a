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
//     assemblies), or answers NO_RESOURCES "No resources connected";
//  4. submits a messages.RCSubmission to the RC, with the reply subject
//     subjects.GWAnswer(gw, request) and the deadline;
//  5. forwards the first answer that arrives there (one message or chunks)
//     to the client, bytes and headers unchanged, chunked again when it is
//     above the client's max payload; later answers for the same request are
//     dropped;
//  6. if none arrives by deadline + Config.TimeoutMargin, answers TIMEOUT
//     with "Request was timed out by the service gateway" (seed: the GW
//     times out a request only when the RC has failed to do so).
package gw
