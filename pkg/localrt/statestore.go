package localrt

// StateStore keeps part of the local runtime's state durably, so that a
// restarted local stack finds what AWS would still hold: the messages of
// its SQS queues (SQSQueueConfig.Store, OpenMemoryQueue) and the events its
// bus accepted but had not delivered, with its rule dead letters
// (BusConfig.Store). localstate.Journal implements it.
//
// Keys are strings under a prefix per owner ("sqs/<queue ARN>/<message
// id>", "memq/<queue URL>/<message id>", "bus/<bus ARN>/..."); values are
// the owner's JSON. Implementations must be safe for concurrent use.
type StateStore interface {
	// Records returns a copy of every record whose key starts with prefix.
	Records(prefix string) map[string][]byte
	// Put stores value under key; when it returns nil the record survives
	// the process being killed.
	Put(key string, value []byte) error
	// Delete removes keys (absent ones are ignored), under the same
	// guarantee.
	Delete(keys ...string) error
}
