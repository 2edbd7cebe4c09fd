package localrt

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// blockedSender is a queue target that fails until open is closed.
type blockedSender struct {
	open chan struct{}
	next MessageSender
}

func (s *blockedSender) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	select {
	case <-s.open:
		return s.next.SendMessage(ctx, in, o...)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestBusKeepsUndeliveredEventsAcrossRestart: an event the bus accepted
// (PutEvents answered success, so the relay marks it published) and had
// not handed to its target when the stack stopped is delivered after the
// restart: Close keeps it instead of dead-lettering it, Resume delivers it.
func TestBusKeepsUndeliveredEventsAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")
	j := openJournal(t, path)
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "notifier", Store: j})
	b := newTestBus(t, func(c *BusConfig) { c.Store = j; c.TargetMaxAttempts = 1000 })
	b.SubscribeQueue(testNotifier, &blockedSender{open: make(chan struct{}), next: q}, q.URL())
	out, err := b.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, `{"event_id":"kept"}`)}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if len(b.DeadLetters()) != 0 || q.Len() != 0 {
		t.Fatalf("closing dead-lettered (%d) or delivered (%d) the event", len(b.DeadLetters()), q.Len())
	}
	_ = j.Close()

	j = openJournal(t, path)
	defer j.Close()
	q = newTestSQSQueue(t, SQSQueueConfig{Name: "notifier", Store: j})
	b = newTestBus(t, func(c *BusConfig) { c.Store = j })
	b.SubscribeQueue(testNotifier, q, q.URL())
	n, err := b.Resume()
	if err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v; want the kept delivery started", n, err)
	}
	waitIdle(t, b)
	msgs := receiveN(t, q, 10)
	if len(msgs) != 1 || !strings.Contains(aws.ToString(msgs[0].Body), `"event_id":"kept"`) {
		t.Fatalf("after the restart the queue holds %v, want the kept event", msgs)
	}
	if recs := j.Records("bus/"); len(recs) != 0 {
		t.Fatalf("the delivered event is still kept: %v", recs)
	}
	if n, _ := b.Resume(); n != 0 {
		t.Fatalf("a second Resume started %d deliveries", n)
	}
}

// TestBusKeepsDeadLettersAcrossRestart: a rule's dead letters outlive the
// process, as a rule target DLQ would.
func TestBusKeepsDeadLettersAcrossRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	j := openJournal(t, path)
	b := newTestBus(t, func(c *BusConfig) { c.Store = j; c.TargetMaxAttempts = 2 })
	q := newTestSQSQueue(t, SQSQueueConfig{})
	b.SubscribeQueue(testNotifier, q, q.URL())
	detail := "{\"event_id\":\"dead\",\"note\":\"\uFFFF\"}" // SQS refuses the body
	if _, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, detail)}}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, b)
	_ = j.Close()
	j = openJournal(t, path)
	defer j.Close()
	b = newTestBus(t, func(c *BusConfig) { c.Store = j })
	dls := b.DeadLetters()
	if len(dls) != 1 || dls[0].Consumer != testNotifier || dls[0].Attempts != 2 || !strings.Contains(string(dls[0].Event.Detail), "dead") {
		t.Fatalf("restored dead letters %+v", dls)
	}
	if recs := j.Records(b.pendingPrefix()); len(recs) != 0 {
		t.Fatalf("the dead-lettered delivery is still pending: %v", recs)
	}
}

// failingStore refuses every write.
type failingStore struct{}

func (*failingStore) Records(string) map[string][]byte { return nil }
func (*failingStore) Put(string, []byte) error         { return errors.New("disk full") }
func (*failingStore) Delete(...string) error           { return errors.New("disk full") }

// TestBusEntryFailsWhenItCannotBeKept: an entry whose delivery the Store
// cannot keep fails alone with InternalFailure (retryable: the relay sends
// it again), and nothing is delivered for it.
func TestBusEntryFailsWhenItCannotBeKept(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, func(c *BusConfig) { c.Store = &failingStore{} })
	q := newTestSQSQueue(t, SQSQueueConfig{})
	b.SubscribeQueue(testNotifier, q, q.URL())
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, `{"a":1}`)}})
	if err != nil || out.FailedEntryCount != 1 || aws.ToString(out.Entries[0].ErrorCode) != "InternalFailure" {
		t.Fatalf("PutEvents = %+v, %v; want the entry failed with InternalFailure", out, err)
	}
	waitIdle(t, b)
	if q.Len() != 0 {
		t.Fatal("an entry that failed was delivered")
	}
}
