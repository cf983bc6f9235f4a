package subjects

// Subjects of the multi-process deployment: GW liveness and the request log.
// Kept beside subjects.go (same conventions) so that the recovery machinery
// is readable in one place.
const (
	// GWHeartbeat: GW -> all GWs, liveness and incarnation (start time) of one
	// GW, per GW id. A GW whose heartbeats stop, or whose start time changes,
	// has its open requests adopted by a peer.
	GWHeartbeat  = "evt.gw.*.heartbeat"
	GWHeartbeatT = "evt.gw.%s.heartbeat"

	// RequestLogEntry: GW -> JetStream, the open entry of one request, per
	// owning GW id and request id. The entry is purged when the request is
	// answered, so the stream holds only unanswered requests, and the open
	// requests of one GW are one subject filter away.
	RequestLogEntry  = "log.req.*.*"
	RequestLogEntryT = "log.req.%s.%s"
)

// GWHeartbeatPattern matches the heartbeats of every GW.
func (s Subjects) GWHeartbeatPattern() string { return s.rel(GWHeartbeat) }

// GWHeartbeat is where GW gwID publishes its heartbeat.
func (s Subjects) GWHeartbeat(gwID string) string { return s.build(GWHeartbeatT, gwID) }

// RequestLogEntryPattern matches the log entries of every GW: the request
// log stream's subject filter.
func (s Subjects) RequestLogEntryPattern() string { return s.rel(RequestLogEntry) }

// RequestLogEntry is the subject of the log entry of requestID, owned by gwID.
func (s Subjects) RequestLogEntry(gwID, requestID string) string {
	return s.build(RequestLogEntryT, gwID, requestID)
}

// DAPEventStreamSubjects are the subjects captured by the DAP state stream
// (DAPStateStream): the DAP events themselves. With one message kept per
// subject, the stream holds each DAP's last registration, status, vintage,
// heartbeat (which carries the full registration) and loss notice, so an RC
// rebuilds the fleet from it without any DAP re-registering and without a
// change to how DAPs publish.
func (s Subjects) DAPEventStreamSubjects() []string { return []string{s.DAPEventsPattern()} }
