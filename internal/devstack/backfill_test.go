package devstack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// replayCounter counts, per consumer, the replayed events (with the
// replay-name field) the bus sends to its queue.
type replayCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *replayCounter) wrap(consumer string, q localrt.MessageSender) localrt.MessageSender {
	return sendFunc(func(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		if strings.Contains(aws.ToString(in.MessageBody), `"`+localrt.ReplayNameField+`":`) {
			r.mu.Lock()
			r.n[consumer]++
			r.mu.Unlock()
		}
		return q.SendMessage(ctx, in, o...)
	})
}

func (r *replayCounter) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

type sendFunc func(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)

func (f sendFunc) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return f(ctx, in, o...)
}

func scanAll(ctx context.Context, t *testing.T, ddb *dynamodb.Client, table string, f func(map[string]types.AttributeValue)) {
	t.Helper()
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		for _, it := range page.Items {
			f(it)
		}
	}
}

func attrS(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// ledgerState is a ledger's whole state: its entries by event id and its
// balances by currency.
type ledgerState struct {
	entries  map[string]ledger.Entry
	balances map[string]int64
}

func readLedger(ctx context.Context, t *testing.T, ddb *dynamodb.Client, table string, l *ledger.Ledger) ledgerState {
	t.Helper()
	st := ledgerState{entries: map[string]ledger.Entry{}}
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		for _, it := range page.Items {
			var e ledger.Entry
			if err := attributevalue.UnmarshalMap(it, &e); err != nil {
				t.Fatal(err)
			}
			if e.EventID != "" {
				e.BookedAt = time.Time{} // when it was booked differs, by design
				st.entries[e.EventID] = e
			}
		}
	}
	var err error
	if st.balances, err = l.Balances(ctx); err != nil {
		t.Fatalf("balances of %s: %v", table, err)
	}
	return st
}

// diffLedgers lists every difference between two ledger states.
func diffLedgers(want, got ledgerState) []string {
	var d []string
	for id, w := range want.entries {
		if g, ok := got.entries[id]; !ok {
			d = append(d, fmt.Sprintf("entry %s (%s %d %s of order %s seq %d) missing", id, w.Direction, w.AmountMinor, w.Currency, w.OrderID, w.Sequence))
		} else if g != w {
			d = append(d, fmt.Sprintf("entry %s: %+v, want %+v", id, g, w))
		}
	}
	for id := range got.entries {
		if _, ok := want.entries[id]; !ok {
			d = append(d, "entry "+id+" booked only by the new ledger")
		}
	}
	for c, w := range want.balances {
		if got.balances[c] != w {
			d = append(d, fmt.Sprintf("balance %s: %d, want %d", c, got.balances[c], w))
		}
	}
	for c, g := range got.balances {
		if _, ok := want.balances[c]; !ok && g != 0 {
			d = append(d, fmt.Sprintf("balance %s: %d, want none", c, g))
		}
	}
	sort.Strings(d)
	return d
}

// TestBackfillNewLedgerFromTheArchive: a second ledger added to a running
// local stack after 300 orders, and backfilled from the bus's archive with
// outboxctl's Backfill through the stack's AWS front (the replay goes to
// its rule only) while more orders keep coming, ends with the same entries
// (event for event: amount, direction, currency, order, sequence) and the
// same balances as the ledger that saw every event live. The replay range
// overlaps the live traffic the new rule already receives: some events
// reach the new ledger twice (counted), and nothing is booked twice. The
// original ledger gets nothing from the replay.
func TestBackfillNewLedgerFromTheArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	replayedTo := &replayCounter{n: map[string]int{}}
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "bf", Logger: quiet, ReconcileEvery: time.Second, ReconcileAfter: 20 * time.Second,
		AWSAddr: "127.0.0.1:0", ArchiveDelay: 300 * time.Millisecond, WrapQueueTarget: replayedTo.wrap})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()

	rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 300, Concurrency: 8, Seed: 11, Logger: quiet})
	if rep.Unexpected != 0 || rep.Ambiguous != 0 {
		t.Fatalf("API answers broke the contract: %s", rep)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	eb := eventbridge.NewFromConfig(dynoxide.AWSConfig(s.AWSURL))
	created, err := operator.ArchiveCreated(ctx, eb, s.ArchiveName)
	if err != nil {
		t.Fatal(err)
	}
	// The start-point diagnostic: no order predates the archive here; an
	// archive created now would miss every order's first events.
	if g, err := operator.FindStartGap(ctx, s.DDB, s.Settings.OrdersTable, created); err != nil || g.Before != 0 {
		t.Fatalf("start gap with the stack's archive: %+v %v", g, err)
	}
	if g, err := operator.FindStartGap(ctx, s.DDB, s.Settings.OrdersTable, time.Now()); err != nil || g.Before != int(rep.Orders) || !strings.Contains(g.String(), "GAP") {
		t.Fatalf("start gap with an archive created after %d orders: %+v %v", rep.Orders, g, err)
	}

	const name = "ledger-rebuilt"
	l2, path, err := s.AddLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// Live traffic during the backfill.
	var wg sync.WaitGroup
	var live *devstack.DriveReport
	before := s.Bus.Stats().Accepted
	wg.Add(1)
	go func() {
		defer wg.Done()
		live = devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 60, Concurrency: 4, Seed: 12, Logger: quiet})
	}()
	for s.Bus.Stats().Accepted < before+20 {
		time.Sleep(10 * time.Millisecond)
	}
	var progress []operator.ReplayProgress
	p, err := operator.Backfill(ctx, eb, operator.BackfillOptions{Archive: s.ArchiveName, Rule: name + "-order-events", Bus: s.Settings.EventBus,
		Settle: time.Second, Poll: 50 * time.Millisecond}, func(p operator.ReplayProgress, _ string) { progress = append(progress, p) })
	if err != nil {
		t.Fatalf("backfill: %v", err)
	}
	if p.State != "COMPLETED" || p.Percent != 100 || len(progress) == 0 {
		t.Fatalf("backfill ended %+v after %d progress reports", p, len(progress))
	}
	wg.Wait()
	if live.Unexpected != 0 || live.Ambiguous != 0 {
		t.Fatalf("live traffic: %s", live)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}

	a, err := s.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range a.Problems {
		t.Error(pr)
	}
	want := readLedger(ctx, t, s.DDB, s.Settings.LedgerTable, s.Ledger)
	got := readLedger(ctx, t, s.DDB, "bf-"+name, l2)
	if len(want.entries) < 100 {
		t.Fatalf("the original ledger booked only %d entries", len(want.entries))
	}
	for _, d := range diffLedgers(want, got) {
		t.Error(d)
	}
	st := s.Bus.Stats()
	t.Logf("events %d, replayed %d, deliveries to %s %d, entries %d, currencies %d", a.Events, st.Replayed, name, st.Deliveries[name], len(got.entries), len(got.balances))
	if st.Replayed < int64(a.Events-int(live.Acked)) {
		t.Errorf("replayed %d events; the archive held at least %d", st.Replayed, a.Events-int(live.Acked))
	}
	if st.Deliveries[name] <= int64(a.Events) {
		t.Errorf("the new ledger got %d deliveries for %d events: the replay did not overlap the live traffic", st.Deliveries[name], a.Events)
	}
	if n := path.DLQ.Len(); n != 0 {
		t.Errorf("the new ledger dead-lettered %d events (a gap it could not close?)", n)
	}
	// Only the named rule got the replay.
	for c, n := range replayedTo.counts() {
		if c != name && n > 0 {
			t.Errorf("consumer %s got %d replayed events; only %s's rule was named", c, n, name)
		}
	}
	// Event for event: every outbox event has the new ledger's dedup
	// marker (applied, money or not) as it has the original's.
	markers := map[string]bool{}
	scanAll(ctx, t, s.DDB, s.Settings.DedupTable, func(it map[string]types.AttributeValue) { markers[attrS(it, dedup.AttrPK)] = true })
	n := 0
	scanAll(ctx, t, s.DDB, s.Settings.OutboxTable, func(it map[string]types.AttributeValue) {
		id := attrS(it, outbox.AttrEventID)
		if id == "" {
			return
		}
		n++
		if markers[dedup.MarkerKey("ledger", id)] && !markers[dedup.MarkerKey(name, id)] {
			t.Errorf("event %s applied by the ledger, not by %s", id, name)
		}
	})
	if n != a.Events {
		t.Errorf("outbox has %d events, the audit %d", n, a.Events)
	}
}
