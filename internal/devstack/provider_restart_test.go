package devstack_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
)

// TestProviderKeepsShipmentsAcrossStackRestart: orders paid before and
// after a restart of the stack on the same data get distinct shipment ids,
// and the provider still knows the shipments made before the restart (it
// used to restart empty at shp_000001: after a restart two orders shared a
// shipment id, and cancelling one cancelled the other's shipment).
func TestProviderKeepsShipmentsAcrossStackRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	opts := devstack.Options{Prefix: "provrestart", DataFile: filepath.Join(dir, "dev.db"), CheckpointFile: filepath.Join(dir, "cp.json"),
		Logger: quiet, ReconcileEvery: time.Second}
	for run, seed := range []uint64{5, 6} {
		s, err := devstack.Start(ctx, opts)
		if err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 20, Concurrency: 4, Seed: seed, Logger: quiet})
		if err := s.Drain(ctx); err != nil {
			s.Close()
			t.Fatal(err)
		}
		if run == 0 {
			s.Close()
			continue
		}
		defer s.Close()
		byID := map[string]string{} // shipment id -> order id, as the consumer recorded them
		var shipped int
		out, err := s.DDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Settings.ShipmentsTable)})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			id, _ := it[fulfilment.AttrShipmentID].(*types.AttributeValueMemberS)
			order, _ := it[fulfilment.AttrPK].(*types.AttributeValueMemberS)
			if id == nil || order == nil {
				continue
			}
			shipped++
			if other, dup := byID[id.Value]; dup && other != order.Value {
				t.Errorf("shipment %s was recorded for orders %s and %s", id.Value, other, order.Value)
			}
			byID[id.Value] = order.Value
		}
		sa, err := s.AuditShipments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range sa.Problems {
			t.Error(p)
		}
		if shipped == 0 || sa.Missing != 0 || sa.NotCancelled != 0 || sa.Expected != shipped {
			t.Fatalf("after the restart: %d shipments recorded, provider audit %+v", shipped, sa)
		}
	}
}
