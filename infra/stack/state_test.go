package stack

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// dynamoWrites are the DynamoDB actions that change items.
var dynamoWrites = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
	"dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate", "dynamodb:PartiQLDelete"}

// TestConsumerStateIsWritableByItsConsumerOnly (issue #31, class 5):
// every consumer's dedup state — markers, ordering gates, resequencer
// buffer — lives in its own table, and no role of the stack but that
// consumer's function role may write that table (or any table another
// consumer writes). With the shared dedup table of e303f57 the ledger's
// and the notifier's roles could both write it: a principal with the
// notifier's role could plant a buffer item that the ledger's sweep then
// applies.
func TestConsumerStateIsWritableByItsConsumerOnly(t *testing.T) {
	for name, syn := range map[string]*synthesized{"default": def, "custom": custom} { // the drop-in stack has no consumers
		s := syn.stack
		key := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		writers := map[string][]string{} // table ARN (JSON) -> roles that may write it
		for _, st := range statements(t, syn) {
			if !slices.ContainsFunc(st.actions, func(a string) bool { return slices.Contains(dynamoWrites, a) }) {
				continue
			}
			for _, r := range st.resources {
				writers[key(r)] = append(writers[key(r)], st.role)
			}
		}
		for _, consumer := range consumerNames {
			c := s.Consumers[consumer]
			role := roleOf(t, syn, syn.id(c.Function))
			table := key(getAtt(syn.id(c.Table), "Arn"))
			for _, w := range writers[table] {
				if w != role {
					t.Errorf("%s: role %s may write consumer %s's table", name, w, consumer)
				}
			}
			// Its role writes no table another role writes.
			for res, ws := range writers {
				if slices.Contains(ws, role) && slices.ContainsFunc(ws, func(w string) bool { return w != role }) {
					t.Errorf("%s: consumer %s's role writes %s, which other roles %v write too", name, consumer, res, ws)
				}
			}
			if !ordered(consumer) {
				continue
			}
			// The ordered consumer's state is in that table: its function
			// names no other (no DEDUP_TABLE_NAME) and its table carries
			// the state index.
			env, _ := get(syn.props(t, syn.id(c.Function)), "Environment", "Variables").(map[string]any)
			if _, shared := env[config.EnvDedupTable]; shared {
				t.Errorf("%s: consumer %s is given a separate dedup table (%s)", name, consumer, config.EnvDedupTable)
			}
			gsis, _ := syn.props(t, syn.id(c.Table))["GlobalSecondaryIndexes"].([]any)
			if !strings.Contains(key(gsis), `"IndexName":"buffered"`) {
				t.Errorf("%s: consumer %s's table lacks the state index", name, consumer)
			}
		}
		if len(writers) == 0 {
			t.Fatalf("%s: no DynamoDB write grants found", name)
		}
	}
	if !ordered(routing.ConsumerLedger) || !ordered(routing.ConsumerNotifier) {
		t.Fatal("the ledger and the notifier are ordered consumers")
	}
}
