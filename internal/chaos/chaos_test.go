package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/chaos"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
)

// TestChaosSmall is the small chaos audit run by make test: a few hundred
// orders through the real HTTP API with faults at every boundary. It fails
// if any promise is broken, and also if the faults did not actually bite.
func TestChaosSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos audit skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Config{Orders: 250, EpochOrders: 250, Seed: 42, Rate: 0.05, OnlyEpoch: -1})
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	t.Log(rep.Summary())
	for _, p := range rep.Problems {
		t.Error(p)
	}
	if !rep.OK() {
		t.Fatalf("promises broken:\n%s", rep.Table())
	}
	if rep.Published+rep.Parked != rep.Events || rep.Events != rep.Committed {
		t.Fatalf("events=%d committed=%d published=%d parked=%d", rep.Events, rep.Committed, rep.Published, rep.Parked)
	}
	for _, k := range []faults.Kind{faults.FailBeforeSend, faults.ResponseLost, faults.Throttle, faults.EntryRetryable, faults.CrashAfterEffect,
		faults.ConsumerOutage, faults.ConsumerRejected, faults.TimeoutAfterHandle, faults.SlowCall} {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s fault was injected: the audit proved nothing about it", k)
		}
	}
	// Consumer failures must really reach the DLQ (the path AWS takes after
	// maxReceiveCount receives) and come back only through the redrive.
	if rep.DeadLettered == 0 || rep.Redriven != rep.DeadLettered {
		t.Errorf("dead_lettered=%d redriven=%d: want > 0 and equal", rep.DeadLettered, rep.Redriven)
	}
	// Stored text SQS refuses is parked (its parked message accepted by the
	// strict queue), never published into a queue that refuses it.
	if rep.HostileWritten == 0 || rep.Parked < rep.HostileWritten {
		t.Errorf("hostile legacy changes %d, parked %d: every hostile change must be parked", rep.HostileWritten, rep.Parked)
	}
	// The fulfilment provider shipped each paid order once despite provider
	// faults and crashes before COMPLETED (it honours Idempotency-Key).
	if rep.Shipments == 0 || rep.ShipmentDuplicates != 0 || rep.ShipmentsMissing != 0 || rep.Faults[faults.CrashBeforeComplete] == 0 {
		t.Errorf("shipments=%d duplicates=%d missing=%d crashes before COMPLETED=%d", rep.Shipments, rep.ShipmentDuplicates, rep.ShipmentsMissing, rep.Faults[faults.CrashBeforeComplete])
	}
	// Late bus deliveries reorder events; the ordered consumers still apply
	// each order's events in sequence.
	if rep.Faults[faults.Reorder] == 0 || rep.OrderedCommitsWitnessed < rep.Committed || rep.AppliedOutOfOrder != 0 {
		t.Errorf("reorder faults %d, ordered commits witnessed %d (committed changes %d), applied out of order %d: want > 0, >= committed, 0",
			rep.Faults[faults.Reorder], rep.OrderedCommitsWitnessed, rep.Committed, rep.AppliedOutOfOrder)
	}
	if rep.ConsumerTimeouts == 0 {
		t.Error("no consumer invocation timed out: the function timeout path was not exercised")
	}
	if rep.DuplicatesAbsorbed == 0 {
		t.Error("no duplicate delivery was absorbed: consumer dedup was not exercised")
	}
}

// TestChaosNaiveProviderDuplicatesAreTraced runs a provider that ignores
// Idempotency-Key: failures in the one window no library can close (the
// provider acted, the shipment is not recorded yet) produce duplicate
// shipments, and every duplicate must trace to a provider answer lost after
// it acted or one answered but not recorded (or to an injected crash
// before COMPLETED on the same key). A crash before COMPLETED alone comes
// after the shipment was recorded, and the redelivery reads the shipments
// table before it calls the provider: it causes none
// (fulfilment's TestCrashBetweenProviderAnswerAndCompleted).
func TestChaosNaiveProviderDuplicatesAreTraced(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos audit skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Config{Orders: 150, EpochOrders: 150, Seed: 43, Rate: 0.05, OnlyEpoch: -1, NaiveProvider: true})
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	t.Log(rep.Summary())
	if rep.ShipmentDuplicates == 0 {
		t.Fatal("no duplicate shipment: the naive provider run proved nothing")
	}
	t.Logf("duplicates %d: %d from injected crashes before COMPLETED, %d from answers lost after acting, %d answered but not completed, %d untraced",
		rep.ShipmentDuplicates, rep.DuplicatesFromCrashes, rep.DuplicatesFromLateAnswers, rep.DuplicatesFromFailedCompletion, rep.DuplicatesUntraced)
	if rep.DuplicatesUntraced != 0 ||
		rep.DuplicatesFromCrashes+rep.DuplicatesFromLateAnswers+rep.DuplicatesFromFailedCompletion != rep.ShipmentDuplicates {
		t.Fatal("every duplicate must trace to the documented window")
	}
	if rep.ShipmentsMissing != 0 || rep.Lost != 0 {
		t.Fatalf("missing %d lost %d", rep.ShipmentsMissing, rep.Lost)
	}
}
