package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

const testBus = "orders-bus"

func newTestBus(t *testing.T, mut func(*BusConfig)) *Bus {
	t.Helper()
	cfg := BusConfig{Name: testBus, Rules: testRules(), TargetRetryBaseDelay: time.Millisecond, TargetRetryMaxDelay: 2 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	if mut != nil {
		mut(&cfg)
	}
	b, err := NewBus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func entry(detailType, detail string) ebtypes.PutEventsRequestEntry {
	return ebtypes.PutEventsRequestEntry{
		EventBusName: aws.String(testBus), Source: aws.String(testSource),
		DetailType: aws.String(detailType), Detail: aws.String(detail),
	}
}

func waitIdle(t *testing.T, b *Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// The Bus is a drop-in for the eventbridge client.
var _ PutEventsAPI = (*eventbridge.Client)(nil)
var _ PutEventsAPI = (*Bus)(nil)
var _ MessageSender = (*MemoryQueue)(nil)

func TestBusRejectsRequestsAsAWSDoes(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, nil)
	ctx := context.Background()
	var eleven []ebtypes.PutEventsRequestEntry
	for range 11 {
		eleven = append(eleven, entry(testPlaced, `{}`))
	}
	tests := []struct {
		name    string
		entries []ebtypes.PutEventsRequestEntry
		code    string
	}{
		{"11 entries", eleven, "ValidationException"},
		{"no entries", nil, "ValidationException"},
		// AWS: "Total size of the entries in the request is over the limit."
		{"one entry over 256 KB", []ebtypes.PutEventsRequestEntry{entry(testPlaced, `{"x":"`+strings.Repeat("y", 256*1024)+`"}`)}, "ValidationException"},
		{"entries each under, together over 256 KB", []ebtypes.PutEventsRequestEntry{
			entry(testPlaced, `{"x":"`+strings.Repeat("y", 100*1024)+`"}`),
			entry(testPlaced, `{"x":"`+strings.Repeat("y", 100*1024)+`"}`),
			entry(testPlaced, `{"x":"`+strings.Repeat("y", 100*1024)+`"}`),
		}, "ValidationException"},
		{"unknown bus", []ebtypes.PutEventsRequestEntry{func() ebtypes.PutEventsRequestEntry {
			e := entry(testPlaced, `{}`)
			e.EventBusName = aws.String("other")
			return e
		}()}, "ResourceNotFoundException"},
		{"default bus when none named", []ebtypes.PutEventsRequestEntry{func() ebtypes.PutEventsRequestEntry {
			e := entry(testPlaced, `{}`)
			e.EventBusName = nil
			return e
		}()}, "ResourceNotFoundException"},
	}
	for _, tc := range tests {
		out, err := b.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: tc.entries})
		if apiCode(err) != tc.code || out != nil {
			t.Errorf("%s: err = %v, want code %s", tc.name, err, tc.code)
		}
	}
	if st := b.Stats(); st.Accepted != 0 || st.RejectedRequests != int64(len(tests)) {
		t.Errorf("stats = %+v", st)
	}
	// The bus ARN is accepted as EventBusName.
	e := entry(testPlaced, `{}`)
	e.EventBusName = aws.String(b.ARN())
	if out, err := b.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{e}}); err != nil || out.FailedEntryCount != 0 {
		t.Errorf("bus ARN: %v %+v", err, out)
	}
}

func TestBusEntryLevelFailures(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, func(c *BusConfig) { c.MaxEntryBytes = 1024 })
	src := testSource
	ok := entry(testPlaced, `{"event_id":"a"}`)
	// The request exactly at the limit: 14 (Time) + source + detail type +
	// detail + resource of atLimit, plus the other entries.
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	noDetail := entry(testPlaced, "")
	noSource := entry(testPlaced, `{}`)
	noSource.Source = nil
	array := entry(testPlaced, `[1,2]`)
	broken := entry(testPlaced, `{"a":`)
	awsSource := entry(testPlaced, `{}`)
	awsSource.Source = aws.String("aws.events")
	longType := entry(strings.Repeat("T", 129), `{}`)
	others := []ebtypes.PutEventsRequestEntry{ok, broken, noDetail, array, awsSource, longType, noSource}
	used := 0
	for _, e := range others {
		used += len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail))
	}
	fill := 1024 - used - 14 - len(src) - len(testPaid) - len(`{"x":""}`) - len("r1")
	if fill%2 != 0 {
		fill--
		others[0].Detail = aws.String(`{"event_id":"ab"}`)
	}
	atLimit := entry(testPaid, `{"x":"`+strings.Repeat("é", fill/2)+`"}`) // é is 2 UTF-8 bytes
	atLimit.Time, atLimit.Resources = &at, []string{"r1"}

	in := append(append([]ebtypes.PutEventsRequestEntry(nil), others[:2]...), atLimit)
	in = append(in, others[2:]...)
	want := []string{"", ErrorCodeMalformedDetail, "", ErrorCodeInvalidArgument, ErrorCodeMalformedDetail, ErrorCodeNotAuthorizedForSource, ErrorCodeInvalidArgument, ErrorCodeInvalidArgument}
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: in})
	if err != nil {
		t.Fatalf("request at the size limit: %v", err)
	}
	if len(out.Entries) != len(in) || out.FailedEntryCount != 6 {
		t.Fatalf("FailedEntryCount %d, entries %d", out.FailedEntryCount, len(out.Entries))
	}
	for i, r := range out.Entries {
		if got := aws.ToString(r.ErrorCode); got != want[i] {
			t.Errorf("entry %d: ErrorCode %q (%s), want %q", i, got, aws.ToString(r.ErrorMessage), want[i])
		}
		if (want[i] == "") != (aws.ToString(r.EventId) != "") {
			t.Errorf("entry %d: EventId %q with error %q", i, aws.ToString(r.EventId), want[i])
		}
	}
	if msg := aws.ToString(out.Entries[7].ErrorMessage); msg != "Parameter Source is not valid. Reason: Source is a required argument." {
		t.Errorf("missing Source message = %q", msg)
	}
	// One byte more and the whole request is refused.
	over := append([]ebtypes.PutEventsRequestEntry(nil), in...)
	over[2].Detail = aws.String(`{"x":"` + strings.Repeat("é", fill/2) + `x"}`)
	if _, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: over}); apiCode(err) != "ValidationException" {
		t.Errorf("request one byte over the limit: err = %v, want ValidationException", err)
	}
	// Every entry incomplete: still HTTP 200 with each entry failed (AWS-recorded).
	out, err = b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{noSource, noDetail}})
	if err != nil || out.FailedEntryCount != 2 || aws.ToString(out.Entries[0].ErrorCode) != ErrorCodeInvalidArgument {
		t.Errorf("all entries incomplete: %v %+v", err, out)
	}
	waitIdle(t, b)
	st := b.Stats()
	if st.Accepted != 2 || st.FailedEntries[ErrorCodeMalformedDetail] != 2 || st.FailedEntries[ErrorCodeInvalidArgument] != 5 || st.RejectedRequests != 1 {
		t.Errorf("stats = %+v", st)
	}
	// The event JSON a target receives.
	evs := b.Events()
	var ev map[string]any
	if err := json.Unmarshal(evs[1], &ev); err != nil {
		t.Fatal(err)
	}
	if ev["version"] != "0" || ev["detail-type"] != testPaid || ev["source"] != src || ev["time"] != "2024-05-06T07:08:09Z" ||
		ev["account"] != DefaultAccount || ev["region"] != DefaultRegion || fmt.Sprint(ev["resources"]) != "[r1]" {
		t.Errorf("event JSON = %s", evs[1])
	}
	if _, isObj := ev["detail"].(map[string]any); !isObj {
		t.Errorf("detail is not an object: %s", evs[1])
	}
	if !strings.Contains(string(evs[0]), `"resources":[]`) {
		t.Errorf("resources must be [] when none: %s", evs[0])
	}
}

// consumerLog records events delivered to each consumer.
type consumerLog struct {
	mu  sync.Mutex
	got map[string][]events.EventBridgeEvent
}

func (c *consumerLog) handler(name string, fail func(events.EventBridgeEvent) error) EventHandler {
	return func(_ context.Context, ev events.EventBridgeEvent) error {
		if fail != nil {
			if err := fail(ev); err != nil {
				return err
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.got == nil {
			c.got = map[string][]events.EventBridgeEvent{}
		}
		c.got[name] = append(c.got[name], ev)
		return nil
	}
}

func (c *consumerLog) types(name string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for _, ev := range c.got[name] {
		m[ev.DetailType]++
	}
	return m
}

func TestBusRoutesByRulesWithUniqueIDs(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, nil)
	log := &consumerLog{}
	b.Subscribe(testLedger, log.handler(testLedger, nil))
	b.Subscribe(testNotifier, log.handler(testNotifier, nil))
	var in []ebtypes.PutEventsRequestEntry
	for _, dt := range testEventTypes {
		in = append(in, entry(dt, fmt.Sprintf(`{"event_id":"%s","amount":12345678901234567890}`, dt)))
	}
	foreign := entry(testPaid, `{}`)
	foreign.Source = aws.String("com.other")
	in = append(in, foreign)
	// The same entry twice: a re-send gets a new id.
	in = append(in, entry(testPaid, `{"event_id":"OrderPaid"}`))
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: in})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	waitIdle(t, b)
	if got := log.types(testLedger); fmt.Sprint(got) != fmt.Sprint(map[string]int{
		testCancelled: 1, testPaid: 2, testPlaced: 1, testShipped: 1}) {
		t.Errorf("ledger got %v", got)
	}
	if got := log.types(testNotifier); fmt.Sprint(got) != fmt.Sprint(map[string]int{
		testCancelled: 1, testPaid: 2, testPlaced: 1, testShipped: 1}) {
		t.Errorf("notifier got %v", got)
	}
	ids := map[string]bool{}
	for _, r := range out.Entries {
		id := aws.ToString(r.EventId)
		if len(id) != 36 || id[14] != '4' || ids[id] {
			t.Errorf("EventId %q is not a fresh UUID v4", id)
		}
		ids[id] = true
	}
	log.mu.Lock()
	for _, evs := range log.got {
		for _, ev := range evs {
			if !ids[ev.ID] || ev.Version != "0" || ev.AccountID != DefaultAccount || ev.Time.IsZero() {
				t.Errorf("delivered event %+v", ev)
			}
			if !strings.Contains(string(ev.Detail), "12345678901234567890") && strings.Contains(string(ev.Detail), "amount") {
				t.Errorf("detail not byte-exact: %s", ev.Detail)
			}
		}
	}
	log.mu.Unlock()
	// fulfilment (Paid x2, Cancelled) has no handler in this test: 3 unsubscribed
	if st := b.Stats(); st.Unmatched != 1 || st.Deliveries[testLedger] != 5 || st.Deliveries[testNotifier] != 5 || st.Unsubscribed != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestBusRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	var dlMu sync.Mutex
	var hook []DeadLetter
	b := newTestBus(t, func(c *BusConfig) {
		c.TargetMaxAttempts = 3
		c.OnDeadLetter = func(d DeadLetter) { dlMu.Lock(); hook = append(hook, d); dlMu.Unlock() }
	})
	log := &consumerLog{}
	var attempts sync.Map
	b.Subscribe(testLedger, log.handler(testLedger, func(ev events.EventBridgeEvent) error {
		n, _ := attempts.LoadOrStore(ev.ID, new(int))
		*(n.(*int))++
		if strings.Contains(string(ev.Detail), "poison") {
			return errors.New("ledger down")
		}
		if *(n.(*int)) == 1 {
			return errors.New("transient")
		}
		return nil
	}))
	b.Subscribe(testNotifier, log.handler(testNotifier, nil))
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		entry(testPaid, `{"event_id":"poison"}`),
		entry(testPaid, `{"event_id":"ok"}`),
	}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatal(err)
	}
	waitIdle(t, b)
	st := b.Stats()
	if st.Deliveries[testLedger] != 1 || st.DeadLettered[testLedger] != 1 ||
		st.Retries[testLedger] != 3 || st.Attempts[testLedger] != 5 || st.Deliveries[testNotifier] != 2 {
		t.Errorf("stats = %+v", st)
	}
	dl := b.DeadLetters()
	if len(dl) != 1 || dl[0].Consumer != testLedger || dl[0].Attempts != 3 || dl[0].Error != "ledger down" ||
		!strings.Contains(string(dl[0].EventJSON), "poison") || dl[0].Event.ID != aws.ToString(out.Entries[0].EventId) {
		t.Errorf("dead letters = %+v", dl)
	}
	dlMu.Lock()
	defer dlMu.Unlock()
	if len(hook) != 1 {
		t.Errorf("OnDeadLetter called %d times", len(hook))
	}
}

func TestBusInterceptorDuplicates(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, func(c *BusConfig) {
		c.Interceptor = func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next EventHandler) error {
			if err := next(ctx, ev); err != nil {
				return err
			}
			return next(ctx, ev) // at-least-once: deliver twice
		}
	})
	log := &consumerLog{}
	b.Subscribe(testNotifier, log.handler(testNotifier, nil))
	if _, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, `{}`)}}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, b)
	if got := log.types(testNotifier)[testPlaced]; got != 2 {
		t.Errorf("delivered %d times, want 2", got)
	}
	if st := b.Stats(); st.Unsubscribed != 1 {
		// the ledger (ordered) matches OrderPlaced but has no handler here
		t.Errorf("stats = %+v", st)
	}
}

func TestSchedulerInvokesWithScheduledEvent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []events.EventBridgeEvent
	s, err := NewScheduler(SchedulerConfig{Interval: 20 * time.Millisecond, RunAtStart: true}, func(_ context.Context, ev events.EventBridgeEvent) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev)
		if len(got) == 2 {
			return errors.New("sweep failed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 3 {
		t.Fatalf("%d runs, want >= 3", len(got))
	}
	ev := got[0]
	if ev.Source != "aws.events" || ev.DetailType != "Scheduled Event" || len(ev.Resources) != 1 || ev.Resources[0] != s.RuleARN() ||
		ev.Version != "0" || ev.ID == "" || string(ev.Detail) != "{}" || ev.Time.IsZero() {
		t.Errorf("scheduled event = %+v", ev)
	}
	if st := s.Stats(); st.Failures != 1 || st.Runs < 3 {
		t.Errorf("stats = %+v", st)
	}
	if _, err := NewScheduler(SchedulerConfig{}, func(context.Context, events.EventBridgeEvent) error { return nil }); err == nil {
		t.Error("zero interval accepted")
	}
}

func TestMemoryQueue(t *testing.T) {
	t.Parallel()
	q := NewMemoryQueue("https://sqs.local/q")
	ctx := context.Background()
	if _, err := q.SendMessage(ctx, &sqsInput{QueueUrl: aws.String("https://sqs.local/q")}); apiCode(err) != "MissingParameter" {
		t.Errorf("empty body: %v", err)
	}
	if _, err := q.SendMessage(ctx, &sqsInput{QueueUrl: aws.String("x"), MessageBody: aws.String("b")}); apiCode(err) != "AWS.SimpleQueueService.NonExistentQueue" {
		t.Errorf("wrong queue: %v", err)
	}
	out, err := q.SendMessage(ctx, &sqsInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String("hello")})
	if err != nil || aws.ToString(out.MessageId) == "" || aws.ToString(out.MD5OfMessageBody) != "5d41402abc4b2a76b9719d911017c592" {
		t.Fatalf("send: %v %+v", err, out)
	}
	if q.Len() != 1 || q.Messages()[0].Body != "hello" || len(q.Purge()) != 1 || q.Len() != 0 {
		t.Errorf("messages = %+v", q.Messages())
	}
}

type sqsInput = sqs.SendMessageInput
