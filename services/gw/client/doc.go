// Package client is the Go library for sg's callers: it calls the sg
// gateway (GW) over NATS.
//
//   - Do, DoRequest and DoJSON call any API (getData, ping, getMeta, sql) and
//     return the answer envelope; GetData is the typed call for tables.
//   - Answers that come in chunks are reassembled (bounded by
//     MaxAnswerBytes) before they are decoded.
//   - GetDataStream and StreamTables (getData, sql) read an answer as a
//     stream of frames (Sg-Accept-Stream) and hand over each window of rows
//     as it comes; StreamJSON writes the frames as the one JSON envelope a
//     whole answer is. Neither holds the answer whole.
//   - A call's context bounds it. When the context ends before the answer,
//     the client tells the GW it gave up (a request on GWCancel, sg.api.cancel,
//     with the request's Sg-Request-Id), so the GW can stop the work.
//   - Every GW endpoint (API subject) has one actor (services/dap/ratelimit)
//     with at most MaxInFlight requests in flight from this client, streams
//     included (admit, attempts). When the GW answers RATE_LIMITED, every
//     caller of that endpoint pauses together for the Sg-Retry-After it gave
//     (whole seconds), then the refused request is sent again; callers of
//     other endpoints carry on. Callers do not each retry on their own, which
//     would keep the GW's downstream busy inside the pause (seed: actor
//     pattern).
//
// All replies but streams' come to one subscription per client (an inbox
// prefix and one token per request), so a request costs a publish and a map
// entry. A stream has a subscription of its own, whose pending limit
// (DefaultStreamPendingBytes) bounds the frames waiting for the caller.
//
// Close the client when done with it; the NATS connection stays the caller's.
//
// Submit sends a request async (the GW answers ACCEPTED with a job at once);
// Poll asks where a job stands, Wait polls it after each Retry-After until it
// finished.
package client
