package subjects

// Live data: table updates on a JetStream stream, one subject per table and label set,
// so that the rdb DAP of a label set consumes exactly its updates with one filter.
const (
	// Live: publisher -> JetStream -> rdb DAPs, rows of one table for one label set,
	// per table and label set (the label set's canonical key, e.g. "region=eu").
	Live  = "live.*.*"
	LiveT = "live.%s.%s"

	// LiveStreamSuffix names the live stream, e.g. SG_LIVE.
	LiveStreamSuffix = "_LIVE"
)

// LivePattern is the subject filter of the live stream: every table and label set.
func (s Subjects) LivePattern() string { return s.rel(Live) }

// Live is where updates of table for the label set with canonical key labelsKey are
// published. Both must be valid tokens (Validate); LabelSet keys are, when label names
// and values hold no '.', wildcard or whitespace.
func (s Subjects) Live(table, labelsKey string) string { return s.build(LiveT, table, labelsKey) }

// LiveLabelSetPattern matches the updates of every table of one label set: the filter of
// that label set's rdb consumer.
func (s Subjects) LiveLabelSetPattern(labelsKey string) string {
	return s.build("live.*.%s", labelsKey)
}

// LiveStream is the name of the live stream, e.g. SG_LIVE.
func (s Subjects) LiveStream() string { return s.streamName(LiveStreamSuffix) }
