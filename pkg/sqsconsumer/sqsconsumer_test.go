package sqsconsumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

const dlqURL = "https://sqs.us-east-1.amazonaws.com/000000000000/consumer-dlq"

// fakeDLQ records SendMessage calls; err, when set, refuses them.
type fakeDLQ struct {
	mu   sync.Mutex
	sent []*sqs.SendMessageInput
	err  error
}

func (f *fakeDLQ) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.sent = append(f.sent, in)
	return &sqs.SendMessageOutput{MessageId: aws.String(fmt.Sprintf("dlq-%d", len(f.sent)))}, nil
}

func (f *fakeDLQ) Sent() []*sqs.SendMessageInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sqs.SendMessageInput(nil), f.sent...)
}

var _ sqsconsumer.MessageSender = (*sqs.Client)(nil)

// eventBody is the EventBridge event JSON a rule's SQS target sends.
func eventBody(detailType string) string {
	return `{"version":"0","id":"ev-` + detailType + `","detail-type":"` + detailType +
		`","source":"com.example.orders","account":"000000000000","time":"2024-05-06T07:08:09Z","region":"us-east-1","resources":[],"detail":{"event_id":"e-` + detailType + `"}}`
}

func record(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: body,
		Attributes: map[string]string{"ApproximateReceiveCount": "3"}, EventSource: "aws:sqs"}
}

func failures(r events.SQSEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func newHandler(t *testing.T, h sqsconsumer.EventHandler, dlq sqsconsumer.MessageSender, mut func(*sqsconsumer.Config)) *sqsconsumer.Handler {
	t.Helper()
	cfg := sqsconsumer.Config{Name: "ledger", Logger: slog.New(slog.DiscardHandler)}
	if dlq != nil {
		cfg.DLQ, cfg.DLQURL = dlq, dlqURL
	}
	if mut != nil {
		mut(&cfg)
	}
	hd, err := sqsconsumer.New(h, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return hd
}

// behave dispatches on the event's detail-type.
func behave(_ context.Context, ev events.EventBridgeEvent) error {
	switch ev.DetailType {
	case "applied":
		return nil
	case "transient":
		return errors.New("table throttled")
	case "permanent":
		return fmt.Errorf("ledger: %w", sqsconsumer.Permanent("forged_source", errors.New("source is not the outbox")))
	case "panics":
		panic("nil map")
	}
	return fmt.Errorf("unexpected detail-type %q", ev.DetailType)
}

// The partial batch response names, by messageId, exactly the messages not
// done (Lambda developer guide, services-sqs-errorhandling: batchItemFailures
// [{itemIdentifier: messageId}]); permanent failures and malformed bodies are
// dead-lettered and acknowledged; a panic fails only its message.
func TestHandleOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		dlqErr     error
		noDLQ      bool
		failed     bool
		deadLetter string // reason of the DLQ message, "" for none
	}{
		{name: "applied", body: eventBody("applied")},
		{name: "ordinary error", body: eventBody("transient"), failed: true},
		{name: "permanent error", body: eventBody("permanent"), deadLetter: "forged_source"},
		{name: "permanent error, DLQ send fails", body: eventBody("permanent"), dlqErr: errors.New("AccessDenied"), failed: true},
		{name: "permanent error, no DLQ", body: eventBody("permanent"), noDLQ: true, failed: true},
		{name: "malformed body", body: `not json {`, deadLetter: sqsconsumer.ReasonMalformedEvent},
		{name: "panic", body: eventBody("panics"), failed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dlq := &fakeDLQ{err: tc.dlqErr}
			var sender sqsconsumer.MessageSender = dlq
			if tc.noDLQ {
				sender = nil
			}
			h := newHandler(t, behave, sender, nil)
			resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{record("m1", tc.body)}})
			if err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if got := failures(resp); tc.failed != (len(got) == 1 && got[0] == "m1") || !tc.failed && len(got) != 0 {
				t.Fatalf("batchItemFailures %v, want failed=%v", got, tc.failed)
			}
			sent := dlq.Sent()
			if tc.deadLetter == "" {
				if len(sent) != 0 {
					t.Fatalf("dead-lettered %d messages, want none", len(sent))
				}
				return
			}
			if len(sent) != 1 {
				t.Fatalf("dead-lettered %d messages, want 1", len(sent))
			}
			in := sent[0]
			if aws.ToString(in.QueueUrl) != dlqURL || aws.ToString(in.MessageBody) != tc.body {
				t.Errorf("DLQ send to %s body %q, want the original body", aws.ToString(in.QueueUrl), aws.ToString(in.MessageBody))
			}
			attr := func(k string) string { return aws.ToString(in.MessageAttributes[k].StringValue) }
			if attr(sqsconsumer.AttrReason) != tc.deadLetter || attr(sqsconsumer.AttrConsumer) != "ledger" ||
				attr(sqsconsumer.AttrSourceMessageID) != "m1" || attr(sqsconsumer.AttrError) == "" || attr(sqsconsumer.AttrReceiveCount) != "3" {
				t.Errorf("DLQ attributes %v", in.MessageAttributes)
			}
			for k, v := range in.MessageAttributes {
				if aws.ToString(v.DataType) == "" {
					t.Errorf("attribute %s has no DataType (SQS requires one)", k)
				}
			}
		})
	}
}

// A batch mixing outcomes: only the failed ones are reported, in batch
// order, and a panic does not stop the messages after it: one at a time in
// batch order (Concurrency 1), and every message handled when they run
// concurrently (the default).
func TestHandleMixedBatch(t *testing.T) {
	t.Parallel()
	for _, conc := range []int{1, 0} {
		t.Run(fmt.Sprint("concurrency=", conc), func(t *testing.T) { testHandleMixedBatch(t, conc) })
	}
}

func testHandleMixedBatch(t *testing.T, conc int) {
	t.Parallel()
	dlq := &fakeDLQ{}
	var mu sync.Mutex
	var seen []string
	h := newHandler(t, func(ctx context.Context, ev events.EventBridgeEvent) error {
		m, _ := sqsconsumer.MessageFromContext(ctx)
		mu.Lock()
		seen = append(seen, m.MessageId)
		mu.Unlock()
		return behave(ctx, ev)
	}, dlq, func(c *sqsconsumer.Config) { c.Concurrency = conc })
	recs := []events.SQSMessage{
		record("a", eventBody("panics")), record("b", eventBody("applied")), record("c", eventBody("transient")),
		record("d", eventBody("permanent")), record("e", eventBody("applied")),
	}
	resp, err := h.Handle(context.Background(), events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(failures(resp), ","); got != "a,c" {
		t.Errorf("failures %s, want a,c", got)
	}
	if conc != 1 {
		slices.Sort(seen)
	}
	if got := strings.Join(seen, ","); got != "a,b,c,d,e" {
		t.Errorf("handled %s, want every message (in order, one at a time)", got)
	}
	if len(dlq.Sent()) != 1 {
		t.Errorf("dead-lettered %d, want 1", len(dlq.Sent()))
	}
}

// A message without messageId makes Handle return an error: Lambda would
// treat its empty itemIdentifier as a complete failure anyway
// (services-sqs-errorhandling). Nothing is handled.
func TestHandleMessageWithoutID(t *testing.T) {
	t.Parallel()
	called := false
	h := newHandler(t, func(context.Context, events.EventBridgeEvent) error { called = true; return nil }, nil, nil)
	_, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{record("a", eventBody("applied")), record("", eventBody("applied"))}})
	if err == nil {
		t.Fatal("Handle accepted a message without messageId")
	}
	if called {
		t.Error("a message was handled before the batch was refused")
	}
}

// Deadline budget: messages start only while more than Reserve is left, so
// the partial batch response arrives before the function timeout, which
// would discard it (AWS-SEMANTICS §12; Lambda developer guide, golang-context).
// One message at a time (Concurrency 1); TestHandleDeadlineReserveInAGroup
// is the same for the messages of one aggregate at the default concurrency.
func TestHandleDeadlineReserve(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var started []string
	var handlerDeadline time.Time
	h := newHandler(t, func(ctx context.Context, ev events.EventBridgeEvent) error {
		m, _ := sqsconsumer.MessageFromContext(ctx)
		mu.Lock()
		started = append(started, m.MessageId)
		handlerDeadline, _ = ctx.Deadline()
		mu.Unlock()
		time.Sleep(time.Second) // one second per message, whatever the context says
		return nil
	}, nil, func(c *sqsconsumer.Config) { c.Reserve = 2 * time.Second; c.Concurrency = 1 })
	deadline := time.Now().Add(2500 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m1", eventBody("applied")), record("m2", eventBody("applied")), record("m3", eventBody("applied")),
	}})
	returned := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if !returned.Before(deadline) {
		t.Fatalf("Handle returned %s after the deadline", returned.Sub(deadline))
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(started, ",") != "m1" {
		t.Errorf("started %v, want only m1", started)
	}
	if got := strings.Join(failures(resp), ","); got != "m2,m3" {
		t.Errorf("failures %s, want m2,m3", got)
	}
	if want := deadline.Add(-2 * time.Second); !handlerDeadline.Equal(want) {
		t.Errorf("handler context deadline %s, want the invocation deadline minus Reserve %s", handlerDeadline, want)
	}
}

// MessageFromContext gives the handler the SQS message (its receive count
// among the attributes); outside Handle it reports false.
func TestMessageFromContext(t *testing.T) {
	t.Parallel()
	if _, ok := sqsconsumer.MessageFromContext(context.Background()); ok {
		t.Error("MessageFromContext outside Handle reported a message")
	}
	var got events.SQSMessage
	var ok bool
	h := newHandler(t, func(ctx context.Context, _ events.EventBridgeEvent) error {
		got, ok = sqsconsumer.MessageFromContext(ctx)
		return nil
	}, nil, nil)
	in := record("m7", eventBody("applied"))
	if _, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{in}}); err != nil {
		t.Fatal(err)
	}
	if !ok || got.MessageId != "m7" || got.Body != in.Body || sqsconsumer.ReceiveCount(got) != 3 {
		t.Errorf("MessageFromContext = %+v, %v", got, ok)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	h := func(context.Context, events.EventBridgeEvent) error { return nil }
	tests := []struct {
		name string
		h    sqsconsumer.EventHandler
		cfg  sqsconsumer.Config
	}{
		{"nil handler", nil, sqsconsumer.Config{Name: "x"}},
		{"no name", h, sqsconsumer.Config{}},
		{"DLQ without URL", h, sqsconsumer.Config{Name: "x", DLQ: &fakeDLQ{}}},
		{"negative reserve", h, sqsconsumer.Config{Name: "x", Reserve: -time.Second}},
		{"MaxMessageBytes under 1 KiB", h, sqsconsumer.Config{Name: "x", MaxMessageBytes: 1023}},
		{"MaxMessageBytes over 1 MiB", h, sqsconsumer.Config{Name: "x", MaxMessageBytes: 1<<20 + 1}},
	}
	for _, tc := range tests {
		if _, err := sqsconsumer.New(tc.h, tc.cfg); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
	if _, err := sqsconsumer.New(h, sqsconsumer.Config{Name: "x"}); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

// The error attribute is cut to MaxErrorAttributeBytes and cleaned of
// characters SQS refuses (quotas-messages), so the DLQ send is not refused.
func TestHandleDeadLetterErrorAttributeIsSafe(t *testing.T) {
	t.Parallel()
	dlq := &fakeDLQ{}
	h := newHandler(t, func(context.Context, events.EventBridgeEvent) error {
		return sqsconsumer.Permanent("bad\uFFFFreason", errors.New(strings.Repeat("\x00é", 2000)))
	}, dlq, nil)
	resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{record("m1", eventBody("x"))}})
	if err != nil || len(resp.BatchItemFailures) != 0 || len(dlq.Sent()) != 1 {
		t.Fatalf("Handle: %v %+v, %d sent", err, resp, len(dlq.Sent()))
	}
	for k, v := range dlq.Sent()[0].MessageAttributes {
		s := aws.ToString(v.StringValue)
		if strings.ContainsAny(s, "\x00\uFFFF") {
			t.Errorf("attribute %s holds a character SQS refuses", k)
		}
		if len(s) > sqsconsumer.MaxErrorAttributeBytes {
			t.Errorf("attribute %s is %d bytes", k, len(s))
		}
	}
}

// Body plus message attributes count toward the DLQ's MaximumMessageSize
// (SQS Developer Guide, quotas-messages). A dead-letter that would not fit
// is not sent (SQS would refuse it); the message is reported failed, so the
// queue's redrive policy still moves it.
func TestHandleDeadLetterRespectsDLQSize(t *testing.T) {
	t.Parallel()
	dlq := &fakeDLQ{}
	h := newHandler(t, func(context.Context, events.EventBridgeEvent) error {
		return sqsconsumer.Permanent("unsupported_version", errors.New(strings.Repeat("e", 2000)))
	}, dlq, func(c *sqsconsumer.Config) { c.MaxMessageBytes = 1024 })
	resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{record("m1", eventBody("x"))}})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range dlq.Sent() {
		size := len(aws.ToString(in.MessageBody))
		for k, v := range in.MessageAttributes {
			size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
		}
		if size > 1024 {
			t.Fatalf("sent a %d-byte dead-letter to a DLQ of MaximumMessageSize 1024", size)
		}
	}
	if len(dlq.Sent()) == 0 && strings.Join(failures(resp), ",") != "m1" {
		t.Fatalf("not dead-lettered and not reported failed: %+v", resp)
	}
}

// aggBody is an EventBridge event carrying an outbox envelope of aggregate
// agg at sequence seq (what GroupByAggregate reads).
func aggBody(agg string, seq int64) string {
	return fmt.Sprintf(`{"version":"0","id":"ev-%s-%d","detail-type":"OrderPaid","source":"com.example.orders","account":"000000000000",`+
		`"time":"2024-05-06T07:08:09Z","region":"us-east-1","resources":[],"detail":{"event_id":"e-%s-%d","aggregate_type":"Order","aggregate_id":%q,"sequence":%d}}`,
		agg, seq, agg, seq, agg, seq)
}

// detailOf returns the aggregate and sequence of an aggBody event.
func detailOf(t *testing.T, ev events.EventBridgeEvent) (string, int64) {
	t.Helper()
	var d struct {
		AggregateID string `json:"aggregate_id"`
		Sequence    int64  `json:"sequence"`
	}
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		t.Errorf("detail: %v", err)
	}
	return d.AggregateID, d.Sequence
}

// TestHandleDeadlineReserveInAGroup: the messages of one aggregate are one
// group, handled one at a time: the deadline reserve stops the group as it
// stops a sequential batch.
func TestHandleDeadlineReserveInAGroup(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var started []string
	h := newHandler(t, func(ctx context.Context, ev events.EventBridgeEvent) error {
		m, _ := sqsconsumer.MessageFromContext(ctx)
		mu.Lock()
		started = append(started, m.MessageId)
		mu.Unlock()
		time.Sleep(time.Second)
		return nil
	}, nil, func(c *sqsconsumer.Config) { c.Reserve = 2 * time.Second })
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(2500*time.Millisecond))
	defer cancel()
	resp, err := h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m3", aggBody("o-1", 3)), record("m1", aggBody("o-1", 1)), record("m2", aggBody("o-1", 2)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(started, ",") != "m1" {
		t.Errorf("started %v, want only m1 (the group's lowest sequence)", started)
	}
	if got := failures(resp); len(got) != 2 || !slices.Contains(got, "m2") || !slices.Contains(got, "m3") {
		t.Errorf("failures %v, want m2 and m3", got)
	}
}

// TestHandleGroupsByAggregate: a batch's messages are grouped by aggregate;
// each group runs in sequence order, one message at a time, and different
// groups run at the same time. The proof of concurrency is a barrier, not
// a clock: the first message of each of three groups waits until all
// three are in flight (it would time out one at a time). Bodies without an
// aggregate are groups of their own. Every failure is reported, whichever
// group it is in.
func TestHandleGroupsByAggregate(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		seen     = map[string][]int64{}
		inFlight int
		barrier  = make(chan struct{})
		arrived  int
	)
	h := newHandler(t, func(ctx context.Context, ev events.EventBridgeEvent) error {
		agg, seq := detailOf(t, ev)
		mu.Lock()
		first := agg != "" && len(seen[agg]) == 0
		seen[agg] = append(seen[agg], seq)
		inFlight++
		if first {
			arrived++
			if arrived == 3 {
				close(barrier)
			}
		}
		mu.Unlock()
		if first {
			select {
			case <-barrier:
			case <-time.After(10 * time.Second):
				t.Errorf("group %s: the other groups never ran beside it", agg)
			}
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		if agg == "o-b" && seq == 1 {
			return errors.New("retry me")
		}
		return nil
	}, nil, nil)
	resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		record("a3", aggBody("o-a", 3)), record("b2", aggBody("o-b", 2)), record("a1", aggBody("o-a", 1)),
		record("x", eventBody("noagg")), record("c1", aggBody("o-c", 1)), record("b1", aggBody("o-b", 1)), record("a2", aggBody("o-a", 2)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for agg, want := range map[string][]int64{"o-a": {1, 2, 3}, "o-b": {1, 2}, "o-c": {1}, "": {0}} {
		if !slices.Equal(seen[agg], want) {
			t.Errorf("group %q handled %v, want %v", agg, seen[agg], want)
		}
	}
	if got := failures(resp); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("failures %v, want [b1]", got)
	}
}

// TestHandleConcurrencyBound: with Concurrency 2, never more than two
// groups are in flight, and every message is handled.
func TestHandleConcurrencyBound(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight, most, handled := 0, 0, 0
	h := newHandler(t, func(ctx context.Context, ev events.EventBridgeEvent) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // widen the window for an overlap the bound should prevent
		mu.Lock()
		inFlight--
		handled++
		mu.Unlock()
		return nil
	}, nil, func(c *sqsconsumer.Config) { c.Concurrency = 2 })
	var recs []events.SQSMessage
	for i := range 8 {
		recs = append(recs, record(fmt.Sprint("m", i), aggBody(fmt.Sprint("o-", i), 1)))
	}
	if _, err := h.Handle(context.Background(), events.SQSEvent{Records: recs}); err != nil {
		t.Fatal(err)
	}
	if most > 2 || handled != 8 {
		t.Fatalf("at most %d in flight (bound 2), %d handled (want 8)", most, handled)
	}
	if _, err := sqsconsumer.New(func(context.Context, events.EventBridgeEvent) error { return nil }, sqsconsumer.Config{Name: "x", Concurrency: -1}); err == nil {
		t.Fatal("Concurrency -1 accepted")
	}
}

// TestGroupByAggregate reads the envelope's aggregate and sequence, and
// gives bodies without them no group.
func TestGroupByAggregate(t *testing.T) {
	t.Parallel()
	if k, seq, ok := sqsconsumer.GroupByAggregate(aggBody("o-9", 7)); !ok || k != "Order#o-9" || seq != 7 {
		t.Errorf("GroupByAggregate = %q, %d, %v", k, seq, ok)
	}
	for _, body := range []string{eventBody("x"), "not json", `{"detail":[1]}`, ""} {
		if _, _, ok := sqsconsumer.GroupByAggregate(body); ok {
			t.Errorf("GroupByAggregate(%q) found a group", body)
		}
	}
}
