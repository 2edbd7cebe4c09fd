package app

import (
	"reflect"
	"slices"
	"testing"
)

// TestWithRegions: in multi-Region mode the api also needs
// dynamodb:ConditionCheckItem on the outbox table (the home item's
// ConditionCheck), the reconciler its takeover and heartbeat actions on the
// outbox table, and nothing else changes; single-Region permissions stay as
// they are, and WithRegions does not alter the value it is called on.
func TestWithRegions(t *testing.T) {
	t.Parallel()
	for _, f := range Permissions() {
		before := f.Actions()
		got := f.WithRegions().Actions()
		if !reflect.DeepEqual(f.Actions(), before) {
			t.Fatalf("%s: WithRegions changed its receiver", f.Function)
		}
		extra := map[string][]string{
			FunctionAPI:        RegionWriteActions,
			FunctionReconciler: {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"},
		}[f.Function]
		want := before
		if extra != nil {
			for _, a := range extra {
				if slices.Contains(before[ResourceOutboxTable], a) {
					t.Fatalf("single-Region %s already has %s on the outbox table: %v", f.Function, a, before[ResourceOutboxTable])
				}
			}
			want = map[Resource][]string{}
			for r, a := range before {
				want[r] = slices.Clone(a)
			}
			want[ResourceOutboxTable] = append(want[ResourceOutboxTable], extra...)
			slices.Sort(want[ResourceOutboxTable])
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: multi-Region actions %v, want %v", f.Function, got, want)
		}
	}
}
