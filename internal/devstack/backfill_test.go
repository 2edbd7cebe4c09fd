package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
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
	// The start-point diagnostic, for the ledger's rule: the stack's
	// archive (created with the stack, kept 365 days, every event of the
	// source) holds every order's whole history; a backfill starting now
	// would miss every order's first events.
	reach, err := operator.CheckArchiveReach(ctx, eb, operator.ReachOptions{Archive: s.ArchiveName, Rule: "ledger-order-payments", Bus: s.Settings.EventBus, Source: s.Settings.Source})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := operator.FindStartGap(ctx, s.DDB, s.Settings.OrdersTable, reach); err != nil || g.Before != 0 || strings.Contains(g.String(), "GAP") {
		t.Fatalf("start gap with the stack's archive: %+v %v", g, err)
	}
	late := reach
	late.Start, late.Bound, late.From = time.Now(), operator.BoundFrom, time.Now()
	if g, err := operator.FindStartGap(ctx, s.DDB, s.Settings.OrdersTable, late); err != nil || g.Before != int(rep.Orders) || !strings.Contains(g.String(), "GAP") {
		t.Fatalf("start gap of a backfill from now, after %d orders: %+v %v", rep.Orders, g, err)
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
	want, err := s.ReadLedger(ctx, s.Settings.LedgerTable, s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(ctx, "bf-"+name, l2)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Entries) < 100 {
		t.Fatalf("the original ledger booked only %d entries", len(want.Entries))
	}
	for _, d := range devstack.DiffLedgers(want, got) {
		t.Error(d)
	}
	st := s.Bus.Stats()
	t.Logf("events %d, replayed %d, deliveries to %s %d, entries %d, currencies %d", a.Events, st.Replayed, name, st.Deliveries[name], len(got.Entries), len(got.Balances))
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
	for _, table := range []string{s.Settings.LedgerTable, s.StateTables[name]} { // each ledger's own table
		scanAll(ctx, t, s.DDB, table, func(it map[string]types.AttributeValue) { markers[attrS(it, dedup.AttrPK)] = true })
	}
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
