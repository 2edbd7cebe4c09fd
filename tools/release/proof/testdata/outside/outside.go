// Package outside is a team's own code on the outbox library: an account
// aggregate's AmountDeposited event and the relay's request packing.
package outside

import (
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Deposited is the envelope of an AmountDeposited event that takes account
// accountID to version seq.
func Deposited(accountID string, seq int64, cents int64) (outbox.Envelope, error) {
	return outbox.NewEnvelope(
		outbox.Aggregate{Type: "Account", ID: accountID, Sequence: seq},
		outbox.Event{Type: "AmountDeposited", Version: 1, Payload: map[string]any{"cents": cents}},
		outbox.Metadata{},
	)
}

// Requests splits entry sizes (bytes) into PutEvents requests of at most
// maxBytes each, as the relay does.
func Requests(sizes []int, maxBytes int) [][2]int { return relay.Pack(sizes, maxBytes) }
