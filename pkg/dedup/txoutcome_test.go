package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestApplyCancellationOutcomes: for every pair of the seven cancellation
// reason codes at the marker and at one effect, Apply gives exactly one of
// duplicate (false, nil), permanent (PermanentReason names it), an effect
// condition for the consumer to judge (FailedEffect), or retry (the
// identical transaction sent MaxAttempts times, then an error). Every
// failing combination is held in the script for all attempts.
func TestApplyCancellationOutcomes(t *testing.T) {
	t.Parallel()
	const attempts = 3
	for _, marker := range outbox.CancellationReasons {
		for _, effect := range outbox.CancellationReasons {
			t.Run(marker+","+effect, func(t *testing.T) {
				t.Parallel()
				var script []error
				if marker != outbox.ReasonNone || effect != outbox.ReasonNone {
					for range attempts {
						script = append(script, cancelled(marker, effect))
					}
				}
				tx := &fakeTx{script: script}
				a := newApplier(t, tx, dedup.Config{MaxAttempts: attempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond})
				effects := []types.TransactWriteItem{{Put: &types.Put{TableName: &[]string{"side"}[0],
					Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "E#1"}}}}}
				applied, err := a.Apply(context.Background(), testEnvelope(t, 2), effects)
				reason, permanent := dedup.PermanentReason(err)
				_, effectFailed := dedup.FailedEffect(err)
				calls := int(tx.calls.Load())
				codes := []string{marker, effect}
				has := func(c string) bool { return codes[0] == c || codes[1] == c }
				switch {
				case marker == outbox.ReasonNone && effect == outbox.ReasonNone:
					if !applied || err != nil || calls != 1 {
						t.Fatalf("committed: applied=%v err=%v calls=%d", applied, err, calls)
					}
				case marker == outbox.ReasonConditionalCheckFailed:
					if applied || err != nil || calls != 1 {
						t.Fatalf("duplicate: applied=%v err=%v calls=%d", applied, err, calls)
					}
				case has(outbox.ReasonValidation):
					if !permanent || reason != dedup.ReasonTransactionInvalid || calls != 1 {
						t.Fatalf("ValidationError: reason %q %v err=%v calls=%d", reason, permanent, err, calls)
					}
				case has(outbox.ReasonItemCollectionSize):
					if !permanent || reason != dedup.ReasonItemCollectionFull || calls != 1 {
						t.Fatalf("item collection full: reason %q %v err=%v calls=%d", reason, permanent, err, calls)
					}
				case effect == outbox.ReasonConditionalCheckFailed:
					if !effectFailed || permanent || calls != 1 {
						t.Fatalf("effect condition: FailedEffect=%v permanent=%v err=%v calls=%d", effectFailed, permanent, err, calls)
					}
				default: // conflicts, throttling
					if err == nil || permanent || effectFailed || calls != attempts {
						t.Fatalf("retry: err=%v permanent=%v calls=%d", err, permanent, calls)
					}
					for i, in := range tx.inputs[1:] {
						if len(in.TransactItems) != len(tx.inputs[0].TransactItems) {
							t.Fatalf("attempt %d sent another transaction", i+2)
						}
					}
				}
			})
		}
	}
}
