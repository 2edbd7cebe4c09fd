package events_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// ajvCase is one document for validate.mjs.
type ajvCase struct {
	Name string          `json:"name"`
	Doc  json.RawMessage `json:"doc"`
}

// TestSchemasHoldInAjvStrict runs events/validate.mjs: every schema must
// compile in a second, independent validator (Ajv 2020-12 + ajv-formats,
// strict mode, warnings are errors), every sample envelope must validate in
// it, every envelope the order domain emits must validate, and every broken
// envelope the Go validator refuses (brokenEnvelopeCases) must be refused
// too. It skips only when node is not installed; a missing ajv (make deps
// not run) fails.
func TestSchemasHoldInAjvStrict(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the schemas were not checked with the second validator (Ajv); install Node 20 and run make deps")
	}
	if _, err := os.Stat(filepath.Join("..", "node_modules", "ajv", "package.json")); err != nil {
		t.Fatalf("ajv is not installed (%v): run make deps", err)
	}

	var valid, invalid []ajvCase
	add := func(list *[]ajvCase, name string, doc []byte) {
		*list = append(*list, ajvCase{Name: name, Doc: doc})
	}
	payloads := map[string][]any{
		order.EventOrderPlaced:  {order.Placed{OrderID: "o-1", CustomerID: "crm:4711", AmountMinor: order.MaxAmountMinor, Currency: "EUR"}},
		order.EventOrderPaid:    {order.Paid{OrderID: "o-1", AmountMinor: 1, Currency: "JPY"}},
		order.EventOrderShipped: {order.Shipped{OrderID: "o-1"}},
		order.EventOrderCancelled: {
			order.Cancelled{OrderID: "o-1", Reason: "customer request é", WasPaid: true, RefundMinor: order.MaxAmountMinor, Currency: "EUR"},
			order.Cancelled{OrderID: "o-1", WasPaid: false, Currency: "EUR"},
		},
	}
	for _, typ := range order.EventTypes {
		for _, p := range payloads[typ] {
			c, _ := p.(order.Cancelled)
			for _, seq := range order.ExpectedSequences(typ, c.WasPaid) {
				for _, meta := range []outbox.Metadata{{}, {CorrelationID: "corr", CausationID: "cause", Actor: "arn:aws:sts::123456789012:assumed-role/checkout/i-0abc"}} {
					env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: seq},
						outbox.Event{Type: typ, Version: order.EventVersion, Payload: p}, meta)
					if err != nil {
						t.Fatal(err)
					}
					add(&valid, typ, mustDetail(t, env))
				}
			}
		}
	}
	if len(valid) == 0 {
		t.Fatal("no valid cases")
	}

	base, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: 2},
		outbox.Event{Type: order.EventOrderPaid, Version: 1, Payload: order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"}},
		outbox.Metadata{CorrelationID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range brokenEnvelopeCases {
		var m map[string]any
		if err := json.Unmarshal(mustDetail(t, base), &m); err != nil {
			t.Fatal(err)
		}
		tt.mutate(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		add(&invalid, tt.name, b)
	}
	for _, tc := range []struct {
		name    string
		wasPaid bool
		refund  int64
	}{{"paid cancellation without refund", true, 0}, {"unpaid cancellation with refund", false, 10}} {
		e, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: 3},
			outbox.Event{Type: order.EventOrderCancelled, Version: 1, Payload: order.Cancelled{OrderID: "o-1", WasPaid: tc.wasPaid, RefundMinor: tc.refund, Currency: "EUR"}},
			outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		add(&invalid, tc.name, mustDetail(t, e))
	}

	b, err := json.Marshal(map[string][]ajvCase{"valid": valid, "invalid": invalid})
	if err != nil {
		t.Fatal(err)
	}
	casesFile := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(casesFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "validate.mjs", casesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("node validate.mjs: %v\n%s", err, out)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), ": ok") {
		t.Fatalf("unexpected output:\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
