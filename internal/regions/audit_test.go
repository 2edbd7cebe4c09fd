package regions

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// committed returns the commit of account acc's event #seq in region, with
// the balance b.
func committed(t *testing.T, region, acc string, seq, b int64) Committed {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: AccountType, ID: acc, Sequence: seq},
		outbox.Event{Type: EventDeposited, Version: 1, Payload: Payload{Amount: 1, Balance: b}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return Committed{Region: region, Event: env}
}

// cleanObservation is two events of account a-1 written in A, applied
// once by each consumer, in order, published by A only.
func cleanObservation(t *testing.T) (Observation, []Committed) {
	t.Helper()
	c := []Committed{committed(t, RegionA, "a-1", 1, 10), committed(t, RegionA, "a-1", 2, 11)}
	ids := []string{c[0].Event.EventID, c[1].Event.EventID}
	return Observation{
		Committed:   c,
		Statements:  map[string]StatementLine{"a-1": {Seqs: []int64{1, 2}, Events: ids}},
		Notices:     map[string]int64{ids[0]: 1, ids[1]: 1},
		PublishedBy: map[string]map[string]int{ids[0]: {RegionA: 1}, ids[1]: {RegionA: 2}},
		Statuses: map[string]map[string][]StatusChange{RegionA: {"Account#a-1/1": {{Status: "PENDING", Origin: RegionA}, {Status: "PUBLISHED", Origin: RegionA}},
			"Account#a-1/2": {{Status: "PENDING", Origin: RegionA}, {Status: "PARKED", Origin: RegionA},
				{Status: "PENDING", RedriveGeneration: 1, Origin: RegionA}, {Status: "PUBLISHED", RedriveGeneration: 1, Origin: RegionA}}},
			// replicated into B and not yet published there: not stuck (B is not its origin)
			RegionB: {"Account#a-1/1": {{Status: "PENDING", Origin: RegionA}}}},
		Accounts:   map[string]map[string]AccountState{RegionA: {"a-1": {Balance: 11, Version: 2, Home: RegionA}}, RegionB: {"a-1": {Balance: 11, Version: 2, Home: RegionA}}},
		Replicated: true,
	}, c
}

// Every promise the audit checks is found broken when it is, and a clean
// run (a duplicate publish by the origin and a redrive included) has no
// finding.
func TestAuditFindsEachBrokenPromise(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spoil func(o *Observation, c []Committed)
		kind  string
	}{
		{"clean", func(*Observation, []Committed) {}, ""},
		{"never applied by notify", func(o *Observation, c []Committed) { delete(o.Notices, c[1].Event.EventID) }, KindLost},
		{"never applied by statement", func(o *Observation, c []Committed) {
			o.Statements["a-1"] = StatementLine{Seqs: []int64{1}, Events: []string{c[0].Event.EventID}}
		}, KindLost},
		{"applied twice by notify", func(o *Observation, c []Committed) { o.Notices[c[0].Event.EventID] = 2 }, KindDoubleApplied},
		{"applied twice by statement", func(o *Observation, c []Committed) {
			o.Statements["a-1"] = StatementLine{Seqs: []int64{1, 2, 2}, Events: []string{c[0].Event.EventID, c[1].Event.EventID, c[1].Event.EventID}}
		}, KindDoubleApplied},
		{"applied out of order", func(o *Observation, c []Committed) {
			o.Statements["a-1"] = StatementLine{Seqs: []int64{2, 1}, Events: []string{c[1].Event.EventID, c[0].Event.EventID}}
		}, KindAppliedOutOfOrder},
		{"published by the other Region", func(o *Observation, c []Committed) { o.PublishedBy[c[0].Event.EventID][RegionB] = 1 }, KindPublishedByNonOrigin},
		{"published by the survivor under a takeover", func(o *Observation, c []Committed) {
			o.PublishedBy[c[0].Event.EventID][RegionB] = 1
			o.TakenOver = map[string]string{c[0].Event.EventID: RegionB}
		}, ""},
		{"published by a Region other than the survivor", func(o *Observation, c []Committed) {
			o.PublishedBy[c[0].Event.EventID][RegionB] = 1
			o.TakenOver = map[string]string{c[0].Event.EventID: "us-east-1"}
		}, KindPublishedByNonOrigin},
		{"status back to pending", func(o *Observation, _ []Committed) {
			o.Statuses[RegionB] = map[string][]StatusChange{"Account#a-1/1": {{Status: "PENDING"}, {Status: "PUBLISHED"}, {Status: "PENDING"}}}
		}, KindStatusRegression},
		{"never published in its origin", func(o *Observation, _ []Committed) {
			o.Statuses[RegionA]["Account#a-1/1"] = []StatusChange{{Status: "PENDING", Origin: RegionA}}
		}, KindStuckPending},
		{"published to parked", func(o *Observation, _ []Committed) {
			o.Statuses[RegionA]["Account#a-1/1"] = []StatusChange{{Status: "PUBLISHED"}, {Status: "PARKED"}}
		}, KindStatusRegression},
		{"balance not the last event's", func(o *Observation, _ []Committed) {
			o.Accounts[RegionA]["a-1"] = AccountState{Balance: 10, Version: 2, Home: RegionA}
			o.Accounts[RegionB]["a-1"] = AccountState{Balance: 10, Version: 2, Home: RegionA}
		}, KindBalanceMismatch},
		{"replicas differ", func(o *Observation, _ []Committed) {
			o.Accounts[RegionB]["a-1"] = AccountState{Balance: 10, Version: 1, Home: RegionA}
		}, KindDiverged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, c := cleanObservation(t)
			tc.spoil(&o, c)
			r := Audit(o)
			if tc.kind == "" {
				if !r.OK() {
					t.Errorf("clean observation: %s", r)
				}
				return
			}
			if r.Count(tc.kind) != 1 || len(r.Findings) != 1 {
				t.Errorf("want exactly one %s finding, got: %s", tc.kind, r)
			}
		})
	}
}
