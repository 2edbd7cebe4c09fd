package devstack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// TestRestoreLedgerFromBackupThenBackfill (issue #31, class 6) follows
// docs/ARCHIVE.md "Restoring a consumer from a backup": the ledger's table
// — its entries and balances and, beside them, its dedup markers,
// ordering gates and buffer — is backed up while 40 orders are paid; the
// stack goes on (those orders are refunded, more orders come); then the
// ledger is lost and restored from the backup into a new table, keeping
// its consumer name, and backfilled from the archive from shortly before
// the backup's time while live orders keep coming. It ends with the same
// entries and balances as the ledger that never stopped: the refunds after
// the backup are booked (their payments are in the restored table), and
// nothing before the backup is booked twice (its markers are in the
// restored table too). With the shared dedup table of e303f57 the restored
// entries and the not-restored markers disagreed: the events after the
// backup were skipped as applied (the balance 700, want 300).
func TestRestoreLedgerFromBackupThenBackfill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "rs", Logger: quiet, ReconcileEvery: time.Second, ReconcileAfter: 20 * time.Second,
		AWSAddr: "127.0.0.1:0", ArchiveDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()

	rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 120, Concurrency: 8, Seed: 31, Logger: quiet})
	if rep.Unexpected != 0 || rep.Ambiguous != 0 {
		t.Fatalf("API answers broke the contract: %s", rep)
	}
	var paid []string // paid before the backup, refunded after it
	for i := range 40 {
		var o struct {
			ID string `json:"id"`
		}
		post(t, s.URL+"/orders", fmt.Sprintf(`{"customer_id":"c-%d","amount_minor":%d,"currency":"EUR"}`, i, 100+i), &o)
		post(t, s.URL+"/orders/"+o.ID+"/pay", "", nil)
		paid = append(paid, o.ID)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}

	// The backup: the ledger's one table, at one time.
	backupAt := time.Now()
	const restored = "rs-ledger-restored"
	n, err := devstack.SnapshotTable(ctx, s.DDB, s.Settings.LedgerTable, ledger.CreateTableInput(restored))
	if err != nil || n == 0 {
		t.Fatalf("backup: %d items, %v", n, err)
	}

	// Life goes on: the refunds of payments before the backup, more orders.
	for _, id := range paid {
		post(t, s.URL+"/orders/"+id+"/cancel", `{"reason":"changed mind"}`, nil)
	}
	if rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 80, Concurrency: 8, Seed: 32, Logger: quiet}); rep.Unexpected != 0 || rep.Ambiguous != 0 {
		t.Fatalf("API answers broke the contract: %s", rep)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}

	// The ledger is lost; it is restored from the backup into a new table
	// and keeps its consumer name, so it finds its state there.
	const name = "ledger-restored"
	l2, path, err := s.AddLedgerWith(ctx, devstack.LedgerSpec{Name: name, Table: restored, StateConsumer: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // live traffic during the backfill
		defer wg.Done()
		if rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 40, Concurrency: 4, Seed: 33, Logger: quiet}); rep.Unexpected != 0 || rep.Ambiguous != 0 {
			t.Errorf("live traffic: %s", rep)
		}
	}()
	eb := eventbridge.NewFromConfig(dynoxide.AWSConfig(s.AWSURL))
	p, err := operator.Backfill(ctx, eb, operator.BackfillOptions{Archive: s.ArchiveName, Rule: name + "-order-events", Bus: s.Settings.EventBus,
		From: backupAt.Add(-time.Minute), Settle: time.Second, Poll: 50 * time.Millisecond}, nil)
	if err != nil || p.State != "COMPLETED" {
		t.Fatalf("backfill: %+v, %v", p, err)
	}
	wg.Wait()
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}

	want, err := s.ReadLedger(ctx, s.Settings.LedgerTable, s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(ctx, restored, l2)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devstack.DiffLedgers(want, got) {
		t.Error(d)
	}
	if got.Balances["EUR"] != want.Balances["EUR"] {
		t.Errorf("EUR balance %d, want %d", got.Balances["EUR"], want.Balances["EUR"])
	}
	if n := path.DLQ.Len(); n != 0 {
		t.Errorf("the restored ledger dead-lettered %d events", n)
	}
	if b, err := dedup.ListBuffered(ctx, s.DDB, restored, "ledger"); err != nil || len(b) != 0 {
		t.Errorf("the restored ledger still holds %d buffered events (%v)", len(b), err)
	}
	refunds := 0
	for _, e := range got.Entries {
		if e.Direction == ledger.DirectionDebit && strings.HasPrefix(e.Currency, "EUR") {
			refunds++
		}
	}
	if refunds < len(paid) {
		t.Errorf("the restored ledger booked %d refunds, want at least the %d after the backup", refunds, len(paid))
	}
	t.Logf("backup %d items; entries %d (live %d); balances %v", n, len(got.Entries), len(want.Entries), got.Balances)
}
