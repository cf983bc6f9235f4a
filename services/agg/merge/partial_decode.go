package merge

import "github.com/sg-project/sg/messages"

// A partial from the network may claim any number of aggregation states; the
// msgpack library would make them all before decoding one (368 bytes of heap
// per byte of input). They grow as they arrive instead.
func init() { messages.RegisterGrowingSlice[AggState]() }
