package regions

import (
	"fmt"
	"sort"
	"strings"
)

// Finding kinds: what the audit reports (docs/MULTI-REGION.md states the
// promises they break).
const (
	// KindLost: an event a writer committed that a consumer never applied.
	KindLost = "lost"
	// KindDoubleApplied: an event a consumer applied more than once.
	KindDoubleApplied = "double_applied"
	// KindAppliedOutOfOrder: the ordered consumer applied an account's
	// sequence before an earlier one (or skipped one).
	KindAppliedOutOfOrder = "applied_out_of_order"
	// KindPublishedByNonOrigin: a Region's relay or reconciler published
	// an event written in another Region, other than under a takeover (an
	// event the Region took over has its PUBLISHED takeover mark:
	// Observation.TakenOver).
	KindPublishedByNonOrigin = "published_by_non_origin_in_steady_state"
	// KindStatusRegression: an outbox record's status moved backward in a
	// Region's stream (PUBLISHED or PARKED back to PENDING, PUBLISHED to
	// PARKED) without a redrive (a higher redrive_generation).
	KindStatusRegression = "status_regression"
	// KindBalanceMismatch: an account's balance in its home Region is not
	// the balance of its last committed event.
	KindBalanceMismatch = "balance_mismatch"
	// KindDiverged: with replication, an account's item differs between
	// the Regions once replication settled.
	KindDiverged = "diverged"
	// KindStuckPending: an outbox record still PENDING in its origin
	// Region's stream (its last image there) once the runtime settled:
	// neither the relay nor the reconciler published it.
	KindStuckPending = "stuck_pending"
)

// Finding is one broken promise: its kind, what it is about (an event id,
// an account, an outbox record key, each prefixed as the kind says) and
// the evidence.
type Finding struct {
	Kind    string
	Subject string
	Detail  string
}

// Report is the audit's result: every finding, sorted by kind and subject.
type Report struct {
	// Committed is the number of events the writers committed.
	Committed int
	Findings  []Finding
}

// OK reports whether the audit found nothing.
func (r Report) OK() bool { return len(r.Findings) == 0 }

// Count returns the number of findings of kind.
func (r Report) Count(kind string) int {
	n := 0
	for _, f := range r.Findings {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

// String lists the findings, one a line, after a count line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events committed, %d findings\n", r.Committed, len(r.Findings))
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "%s %s: %s\n", f.Kind, f.Subject, f.Detail)
	}
	return b.String()
}

// StatementLine is an account's statement as the ordered consumer wrote it.
type StatementLine struct {
	// Seqs and Events are the sequences and event ids applied, in the
	// order applied.
	Seqs   []int64
	Events []string
}

// StatusChange is one image of an outbox record in a Region's stream.
type StatusChange struct {
	Status            string
	RedriveGeneration int64
	// Origin is the record's outbox.AttrOriginRegion ("" when unstamped).
	Origin string
}

// AccountState is an account's item as read in one Region.
type AccountState struct {
	Balance, Version int64
	Home             string
}

// Observation is what the audit checks: the ground truth (what the writers
// committed) and what each part of the runtime holds. Observe collects it
// from a Runtime; tests may build one by hand.
type Observation struct {
	// Committed are the events the writers committed (Bank.Committed).
	Committed []Committed
	// Statements are the ordered consumer's statements by account.
	Statements map[string]StatementLine
	// Notices are the times the unordered consumer applied each event, by
	// event id.
	Notices map[string]int64
	// PublishedBy counts, by event id, the events each Region's own relay
	// or reconciler put on its bus (not the events forwarded to it), by
	// Region.
	PublishedBy map[string]map[string]int
	// Statuses are each outbox record's images in each Region's stream, in
	// stream order: Region → record key (pk/sk) → images.
	Statuses map[string]map[string][]StatusChange
	// Accounts are the account items in each Region: Region → id → state.
	Accounts map[string]map[string]AccountState
	// TakenOver names, by event id, the survivor Region that published the
	// event under a takeover (its PUBLISHED takeover mark,
	// reconciler.MarkKey): that Region's publishes of it are not
	// published_by_non_origin_in_steady_state.
	TakenOver map[string]string
	// Replicated says the global tables were replicated (and settled), so
	// the Regions' account items must agree.
	Replicated bool
}

// statusRank orders the statuses a record moves through; a move to a
// lower rank is a regression unless a redrive made it.
var statusRank = map[string]int{"PENDING": 0, "PARKED": 1, "PUBLISHED": 2}

// Audit checks obs and returns every finding: lost, double_applied,
// applied_out_of_order, published_by_non_origin_in_steady_state,
// status_regression, stuck_pending, balance_mismatch and (with
// Replicated) diverged. Run it once the runtime settled: an event still
// on its way is reported lost.
func Audit(obs Observation) Report {
	r := Report{Committed: len(obs.Committed)}
	add := func(kind, subject, format string, a ...any) {
		r.Findings = append(r.Findings, Finding{Kind: kind, Subject: subject, Detail: fmt.Sprintf(format, a...)})
	}
	origin := map[string]string{}
	last := map[string]Committed{}
	inStatement := map[string]int{}
	for _, l := range obs.Statements {
		for _, id := range l.Events {
			inStatement[id]++
		}
	}
	for _, c := range obs.Committed {
		id := c.Event.EventID
		origin[id] = c.Region
		if l, ok := last[c.Event.AggregateID]; !ok || c.Event.Sequence > l.Event.Sequence {
			last[c.Event.AggregateID] = c
		}
		switch n := obs.Notices[id]; {
		case n == 0:
			add(KindLost, Notify+":"+id, "%s %s #%d written in %s never applied by %s", c.Event.AggregateID, c.Event.EventType, c.Event.Sequence, c.Region, Notify)
		case n > 1:
			add(KindDoubleApplied, Notify+":"+id, "applied %d times by %s", n, Notify)
		}
		switch n := inStatement[id]; {
		case n == 0:
			add(KindLost, Statement+":"+id, "%s %s #%d written in %s never applied by %s", c.Event.AggregateID, c.Event.EventType, c.Event.Sequence, c.Region, Statement)
		case n > 1:
			add(KindDoubleApplied, Statement+":"+id, "applied %d times by %s", n, Statement)
		}
		for region, n := range obs.PublishedBy[id] {
			if region != c.Region && n > 0 && obs.TakenOver[id] != region {
				add(KindPublishedByNonOrigin, id, "written in %s, published %d times by %s", c.Region, n, region)
			}
		}
	}
	for account, l := range obs.Statements {
		// In order: 1, 2, 3, … (a repeat is double_applied, above).
		inOrder := len(l.Seqs) == 0 || l.Seqs[0] == 1
		for i := 1; i < len(l.Seqs) && inOrder; i++ {
			inOrder = l.Seqs[i] == l.Seqs[i-1] || l.Seqs[i] == l.Seqs[i-1]+1
		}
		if !inOrder {
			add(KindAppliedOutOfOrder, account, "%s applied sequences %v", Statement, l.Seqs)
		}
	}
	for region, records := range obs.Statuses {
		for key, images := range records {
			for i := 1; i < len(images); i++ {
				prev, cur := images[i-1], images[i]
				if statusRank[cur.Status] < statusRank[prev.Status] && cur.RedriveGeneration <= prev.RedriveGeneration {
					add(KindStatusRegression, region+":"+key, "%s then %s (redrive generation %d then %d)", prev.Status, cur.Status, prev.RedriveGeneration, cur.RedriveGeneration)
				}
			}
			if n := len(images); n > 0 && images[n-1].Origin == region && images[n-1].Status == "PENDING" {
				add(KindStuckPending, region+":"+key, "still PENDING in its origin Region after %d images", n)
			}
		}
	}
	for account, c := range last {
		var p Payload
		if err := c.Event.DecodePayload(&p); err != nil {
			add(KindBalanceMismatch, account, "last event %s does not decode: %v", c.Event.EventID, err)
			continue
		}
		home := obs.Accounts[c.Region][account]
		if home.Balance != p.Balance || home.Version != c.Event.Sequence {
			add(KindBalanceMismatch, account, "in %s balance %d version %d, want %d at version %d", c.Region, home.Balance, home.Version, p.Balance, c.Event.Sequence)
		}
		if !obs.Replicated {
			continue
		}
		for region, accounts := range obs.Accounts {
			if got := accounts[account]; region != c.Region && got != home {
				add(KindDiverged, account, "%s has %+v, %s has %+v", c.Region, home, region, got)
			}
		}
	}
	sortFindings(r.Findings)
	return r
}

// sortFindings sorts findings by kind, then subject.
func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Subject < b.Subject
	})
}
