package dedup_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// TestOrderedApplyAgainstDynamoDB: on a real DynamoDB-compatible server an
// ordered Applier commits marker, effect and the ordering item together;
// sequence 1 creates the item, sequence n needs last_sequence n-1; an
// early event writes nothing and names the missing range; a duplicate
// behind the item (marker gone) writes nothing; consumers keep separate
// items for one aggregate.
func TestOrderedApplyAgainstDynamoDB(t *testing.T) {
	env := ddbtest.New(t)
	ctx := context.Background()
	dd, side := ddbtest.Name("dedup"), ddbtest.Name("side")
	env.CreateTable(t, dedup.CreateTableInput(dd))
	env.CreateTable(t, ddbtest.SimpleTableInput(side))
	a := newApplier(t, env.DDB, dedup.Config{Table: dd, Consumer: "ledger", Ordered: true})
	e1, e2, e3 := testEnvelope(t, 1), testEnvelope(t, 2), testEnvelope(t, 3)
	last := func() int64 {
		n, err := a.LastSequence(ctx, "Order", "o-1")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	applied, err := a.Apply(ctx, e3, []types.TransactWriteItem{putEffect(side, "E3", false)})
	gap, ok := dedup.AsGapError(err)
	if applied || !ok || !errors.Is(err, dedup.ErrSequenceGap) {
		t.Fatalf("early event: applied=%v err=%v", applied, err)
	}
	if from, to := gap.Missing(); from != 1 || to != 2 {
		t.Fatalf("missing %d..%d, want 1..2", from, to)
	}
	if _, isTx := outbox.AsTxError(err); isTx {
		t.Fatal("a GapError must not carry the TxError (consumers would judge its reasons)")
	}
	if exists(t, env.DDB, side, pkKey("E3")) || exists(t, env.DDB, dd, a.Key(e3.EventID)) || last() != 0 {
		t.Fatal("an early event wrote something")
	}
	for _, e := range []outbox.Envelope{e1, e2, e3} {
		if applied, err := a.Apply(ctx, e, []types.TransactWriteItem{putEffect(side, "E"+strconv.FormatInt(e.Sequence, 10), false)}); err != nil || !applied {
			t.Fatalf("sequence %d: %v, %v", e.Sequence, applied, err)
		}
		if got := last(); got != e.Sequence {
			t.Fatalf("last_sequence = %d after sequence %d", got, e.Sequence)
		}
	}
	out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(dd), ConsistentRead: aws.Bool(true),
		Key: pkKey(dedup.SequenceKey("ledger", "Order", "o-1"))})
	if err != nil || out.Item == nil {
		t.Fatalf("ordering item: %v", err)
	}
	if pk := out.Item[dedup.AttrPK].(*types.AttributeValueMemberS).Value; pk != "ledger#SEQ#Order#o-1" {
		t.Fatalf("ordering key = %q", pk)
	}
	if id := out.Item[dedup.AttrLastEventID].(*types.AttributeValueMemberS).Value; id != e3.EventID {
		t.Fatalf("last_event_id = %q", id)
	}
	if _, ttl := out.Item[dedup.TTLAttribute]; ttl {
		t.Fatal("the ordering item must not expire")
	}

	// A duplicate whose marker expired: the item says it is behind.
	if _, err := env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(dd), Key: a.Key(e2.EventID)}); err != nil {
		t.Fatal(err)
	}
	if applied, err := a.Apply(ctx, e2, []types.TransactWriteItem{putEffect(side, "E2-again", false)}); err != nil || applied {
		t.Fatalf("duplicate behind the gate: %v, %v", applied, err)
	}
	if exists(t, env.DDB, side, pkKey("E2-again")) || exists(t, env.DDB, dd, a.Key(e2.EventID)) {
		t.Fatal("a duplicate behind the gate wrote something")
	}

	// Another consumer starts its own sequence for the same aggregate.
	b := newApplier(t, env.DDB, dedup.Config{Table: dd, Consumer: "notifier", Ordered: true})
	if _, err := b.Apply(ctx, e2, nil); !errors.Is(err, dedup.ErrSequenceGap) {
		t.Fatalf("notifier sequence 2 first: %v", err)
	}
	if applied, err := b.Apply(ctx, e1, nil); err != nil || !applied {
		t.Fatalf("notifier sequence 1: %v, %v", applied, err)
	}
}

// TestOrderedApplyCancellationOutcomes: for the codes at the marker, one
// effect and the gate, and the ordering item's state when the marker or
// the gate failed, an ordered Apply (no Resequencer) gives: the marker's
// condition → the gate's decision (behind: duplicate; next: adopted, one
// more transaction; ahead: a *GapError, held until its turn — never a
// plain duplicate); the gate's condition → decided by the item (behind:
// duplicate; early: GapError; moved: sent again, even when an effect's
// condition failed with the gate — the predecessor was committing — unless
// ValidationError or ItemCollectionSizeLimitExceeded is there);
// otherwise as unordered, an effect's condition being its own answer only
// while the gate held.
func TestOrderedApplyCancellationOutcomes(t *testing.T) {
	t.Parallel()
	const attempts = 3
	for _, marker := range outbox.CancellationReasons {
		for _, effect := range outbox.CancellationReasons {
			for _, gate := range outbox.CancellationReasons {
				states := []int64{-1}
				if gate == outbox.ReasonConditionalCheckFailed || marker == outbox.ReasonConditionalCheckFailed {
					states = []int64{2, 0, 1} // behind, ahead (no item), next
				}
				for _, last := range states {
					t.Run(marker+","+effect+","+gate+"/"+strconv.FormatInt(last, 10), func(t *testing.T) {
						t.Parallel()
						var script []error
						if marker != outbox.ReasonNone || effect != outbox.ReasonNone || gate != outbox.ReasonNone {
							for range attempts {
								script = append(script, cancelled(marker, effect, gate))
							}
						}
						tx := &fakeGetTx{fakeTx: fakeTx{script: script}, last: last, scriptMarkerOnly: true}
						a := newApplier(t, tx, dedup.Config{Ordered: true, MaxAttempts: attempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond})
						o, err := a.ApplyEvent(context.Background(), testEnvelope(t, 2), []types.TransactWriteItem{putEffect("side", "E#1", false)})
						_, permanent := dedup.PermanentReason(err)
						_, early := dedup.AsGapError(err)
						calls := int(tx.calls.Load())
						has := func(c string) bool { return marker == c || effect == c || gate == c }
						switch {
						case marker == outbox.ReasonNone && effect == outbox.ReasonNone && gate == outbox.ReasonNone:
							if o != dedup.OutcomeApplied || err != nil || calls != 1 {
								t.Fatalf("committed: outcome=%v err=%v calls=%d", o, err, calls)
							}
						case marker == outbox.ReasonConditionalCheckFailed && last == 0:
							if !early || calls != 1 {
								t.Fatalf("applied, ahead of the gate (no resequencer): err=%v calls=%d; want a *GapError", err, calls)
							}
						case marker == outbox.ReasonConditionalCheckFailed:
							want := 1 // behind
							if last == 1 {
								want = 2 // next: the gate adopts it
							}
							if o != dedup.OutcomeDuplicate || err != nil || calls != want {
								t.Fatalf("duplicate (marker): outcome=%v err=%v calls=%d, want %d", o, err, calls, want)
							}
						case gate == outbox.ReasonConditionalCheckFailed && last == 2:
							if o != dedup.OutcomeDuplicate || err != nil || calls != 1 {
								t.Fatalf("duplicate (gate): outcome=%v err=%v calls=%d", o, err, calls)
							}
						case gate == outbox.ReasonConditionalCheckFailed && last == 0:
							if !early || permanent || calls != 1 {
								t.Fatalf("early: err=%v calls=%d", err, calls)
							}
						case has(outbox.ReasonValidation) || has(outbox.ReasonItemCollectionSize):
							if !permanent || calls != 1 {
								t.Fatalf("permanent: err=%v calls=%d", err, calls)
							}
						case effect == outbox.ReasonConditionalCheckFailed && gate != outbox.ReasonConditionalCheckFailed:
							if !dedup.EffectConditionFailed(err, 0) || calls != 1 {
								t.Fatalf("effect condition while the gate held: err=%v calls=%d", err, calls)
							}
						default: // conflicts, throttling, a moved gate (whatever the effect said)
							if err == nil || permanent || early || calls != attempts {
								t.Fatalf("retry: err=%v calls=%d", err, calls)
							}
						}
					})
				}
			}
		}
	}
}

// fakeGetTx is fakeTx plus the ordering item's GetItem: last_sequence last
// (0: no item). With scriptMarkerOnly, the script answers only the Apply
// transactions (those carrying a marker Put); the gate's own writes (an
// adoption) succeed.
type fakeGetTx struct {
	fakeTx
	last             int64
	scriptMarkerOnly bool
}

func (f *fakeGetTx) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.scriptMarkerOnly && (len(in.TransactItems) == 0 || in.TransactItems[0].Put == nil) {
		f.calls.Add(1)
		return &dynamodb.TransactWriteItemsOutput{}, nil
	}
	return f.fakeTx.TransactWriteItems(ctx, in, opts...)
}

func (f *fakeGetTx) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.last <= 0 {
		return &dynamodb.GetItemOutput{}, nil
	}
	return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{dedup.AttrPK: in.Key[dedup.AttrPK],
		dedup.AttrLastSequence: &types.AttributeValueMemberN{Value: strconv.FormatInt(f.last, 10)}}}, nil
}

func TestOrderedNeedsGetItem(t *testing.T) {
	t.Parallel()
	if _, err := dedup.NewApplier(&fakeTx{}, dedup.Config{Table: "d", Consumer: "c", Ordered: true}); err == nil {
		t.Fatal("an ordered Applier without GetItem was built")
	}
	if _, err := dedup.NewApplier(&fakeGetTx{}, dedup.Config{Table: "d", Consumer: "c", Ordered: true}); err != nil {
		t.Fatal(err)
	}
}

func TestNewConsumerOrdering(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       dedup.ConsumerConfig
		def       dedup.Ordering
		want      dedup.Ordering
		wantGapMx int
		ok        bool
	}{
		{"consumer default ordered", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, dedup.Ordered, dedup.Ordered, 5, true},
		{"consumer default unordered", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, dedup.Unordered, dedup.Unordered, 5, true},
		{"no default", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, dedup.OrderingDefault, dedup.Unordered, 5, true},
		{"override to unordered", dedup.ConsumerConfig{ExpectedSource: "com.example.test", Ordering: dedup.Unordered}, dedup.Ordered, dedup.Unordered, 5, true},
		{"Dedup.Ordered", dedup.ConsumerConfig{ExpectedSource: "com.example.test", Dedup: dedup.Config{Ordered: true}}, dedup.Unordered, dedup.Ordered, 5, true},
		{"gap bound", dedup.ConsumerConfig{ExpectedSource: "com.example.test", GapMaxReceives: 3}, dedup.Ordered, dedup.Ordered, 3, true},
		{"negative gap bound", dedup.ConsumerConfig{ExpectedSource: "com.example.test", GapMaxReceives: -1}, dedup.Ordered, "", 0, false},
		{"unknown mode", dedup.ConsumerConfig{ExpectedSource: "com.example.test", Ordering: "sorted"}, dedup.Ordered, "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			cfg.Table, cfg.Dedup.Table = "t", "d"
			c, err := dedup.NewConsumer("ledger", &fakeGetTx{}, cfg, 0, tt.def)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok {
				return
			}
			if c.Config.Ordering != tt.want || c.Applier.Config().Ordered != (tt.want == dedup.Ordered) || c.Config.GapMaxReceives != tt.wantGapMx {
				t.Fatalf("Ordering %q, Dedup.Ordered %v, GapMaxReceives %d", c.Config.Ordering, c.Applier.Config().Ordered, c.Config.GapMaxReceives)
			}
		})
	}
}

// TestHold: an early event is held (a plain error) below GapMaxReceives
// receives and outside SQS, and dead-lettered with sequence_gap and the
// missing range from that receive on; other errors pass through.
func TestHold(t *testing.T) {
	t.Parallel()
	cfg := dedup.ConsumerConfig{ExpectedSource: "com.example.test", Dedup: dedup.Config{Consumer: "ledger"}, GapMaxReceives: 3}
	gap := &dedup.GapError{Consumer: "ledger", AggregateType: "Order", AggregateID: "o-1", Last: 1, Sequence: 4, EventID: "e"}
	wrapped := errors.Join(errors.New("context"), gap)
	for n := 0; n <= 4; n++ {
		var reason string
		h, err := sqsconsumer.New(func(ctx context.Context, _ events.EventBridgeEvent) error {
			err := cfg.Hold(ctx, quiet, wrapped)
			if p, ok := sqsconsumer.AsPermanent(err); ok {
				reason = p.Reason + ": " + p.Err.Error()
			} else if !errors.Is(err, dedup.ErrSequenceGap) {
				t.Errorf("receive %d: held error %v lost ErrSequenceGap", n, err)
			}
			return nil
		}, sqsconsumer.Config{Name: "ledger", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		msg := events.SQSMessage{MessageId: "m", Body: `{"version":"0","id":"x","detail-type":"OrderPaid","source":"s","detail":{}}`}
		if n > 0 {
			msg.Attributes = map[string]string{"ApproximateReceiveCount": strconv.Itoa(n)}
		}
		if _, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg}}); err != nil {
			t.Fatal(err)
		}
		wantDead := n >= 3
		if (reason != "") != wantDead {
			t.Fatalf("receive %d: dead-lettered %q, want %v", n, reason, wantDead)
		}
		if wantDead && !strings.HasPrefix(reason, "sequence_gap: waiting for sequences 2..3 of Order o-1") {
			t.Fatalf("receive %d: %q", n, reason)
		}
	}
	if err := cfg.Hold(context.Background(), quiet, errors.New("other")); err == nil || errors.Is(err, dedup.ErrSequenceGap) {
		t.Fatalf("Hold changed another error: %v", err)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// failingGetTx is fakeTx whose GetItem fails (a throttled or lost read).
type failingGetTx struct{ fakeTx }

func (f *failingGetTx) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, errors.New("read failed")
}

// TestOrderedDuplicateNeedsItsGateRead: an ordered duplicate (marker
// exists) is acknowledged only after its ordering item was read, because
// that read is what drains successors a crash left in the buffer; when the
// read fails, Apply returns an error (deliver it again), never a silent
// duplicate.
func TestOrderedDuplicateNeedsItsGateRead(t *testing.T) {
	t.Parallel()
	tx := &failingGetTx{fakeTx{script: []error{cancelled(outbox.ReasonConditionalCheckFailed, outbox.ReasonNone, outbox.ReasonNone)}}}
	a := newApplier(t, tx, dedup.Config{Ordered: true, MaxAttempts: 2})
	o, err := a.ApplyEvent(context.Background(), testEnvelope(t, 2), []types.TransactWriteItem{putEffect("side", "E#1", false)})
	if err == nil || o != 0 {
		t.Fatalf("ApplyEvent = %v, %v; want an error", o, err)
	}
	un := newApplier(t, &fakeTx{script: []error{cancelled(outbox.ReasonConditionalCheckFailed, outbox.ReasonNone)}}, dedup.Config{})
	if o, err := un.ApplyEvent(context.Background(), testEnvelope(t, 2), []types.TransactWriteItem{putEffect("side", "E#1", false)}); err != nil || o != dedup.OutcomeDuplicate {
		t.Fatalf("unordered duplicate = %v, %v; want OutcomeDuplicate", o, err)
	}
}
