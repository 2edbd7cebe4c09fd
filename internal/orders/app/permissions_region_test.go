package app

import (
	"reflect"
	"slices"
	"testing"
)

// TestWithRegions: in multi-Region mode the api also needs
// dynamodb:ConditionCheckItem on the outbox table (the home item's
// ConditionCheck) and nothing else changes; single-Region permissions stay
// as they are, and WithRegions does not alter the value it is called on.
func TestWithRegions(t *testing.T) {
	t.Parallel()
	for _, f := range Permissions() {
		before := f.Actions()
		got := f.WithRegions().Actions()
		if !reflect.DeepEqual(f.Actions(), before) {
			t.Fatalf("%s: WithRegions changed its receiver", f.Function)
		}
		want := before
		if f.Function == FunctionAPI {
			if slices.Contains(before[ResourceOutboxTable], "dynamodb:ConditionCheckItem") {
				t.Fatalf("single-Region api already has ConditionCheckItem: %v", before[ResourceOutboxTable])
			}
			want = map[Resource][]string{}
			for r, a := range before {
				want[r] = slices.Clone(a)
			}
			want[ResourceOutboxTable] = append(want[ResourceOutboxTable], RegionWriteActions...)
			slices.Sort(want[ResourceOutboxTable])
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: multi-Region actions %v, want %v", f.Function, got, want)
		}
	}
}
