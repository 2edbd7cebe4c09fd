package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"
)

// Bus is a local EventBridge event bus. PutEvents enforces the PutEvents
// contract as AWS does; each accepted entry becomes the EventBridge event
// JSON a target receives, is matched against the routing rules and
// delivered asynchronously (no ordering, at-least-once) to the subscribed
// consumers, each target with bounded retries and exponential backoff, then
// the rule's DLQ (SetDeadLetterQueue) and a dead-letter list. Safe for
// concurrent use.
type Bus struct {
	cfg   BusConfig
	log   *slog.Logger
	rules []busRule

	mu       sync.Mutex
	handlers map[string]busTarget
	stats    BusStats
	accepted []json.RawMessage
	// forwardedIn are the accepted events another bus forwarded (a subset
	// of accepted).
	forwardedIn []json.RawMessage
	dead        []DeadLetter
	inflight    int
	idle        chan struct{}
	closed      bool
	closeCtx    context.Context
	cancelAll   context.CancelFunc
	archives    map[string]*archive
	replays     map[string]*replay
	dlqs        map[string]ruleDLQ // by rule name (SetDeadLetterQueue)
}

// busTarget is a rule target: a function invoked with the event, an SQS
// queue receiving the event JSON as its message body, or another event bus
// (bus, named busARN) receiving it through PutEvents.
type busTarget struct {
	h      EventHandler
	queue  MessageSender
	url    string
	bus    PutEventsAPI
	busARN string
}

type busRule struct {
	rule    Rule
	pattern *Pattern
}

// NewBus returns a bus routing by cfg.Rules. It returns an error for an
// invalid configuration.
func NewBus(cfg BusConfig) (*Bus, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{cfg: cfg, log: cfg.Logger.With("component", "event-bus", "event_bus", cfg.Name), handlers: map[string]busTarget{},
		archives: map[string]*archive{}, replays: map[string]*replay{}}
	for _, r := range cfg.Rules {
		p, err := CompilePattern(r.Pattern)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.Name, err)
		}
		b.rules = append(b.rules, busRule{rule: r, pattern: p})
	}
	b.stats = BusStats{FailedEntries: map[string]int64{}, Deliveries: map[string]int64{}, Attempts: map[string]int64{}, Retries: map[string]int64{}, DeadLettered: map[string]int64{},
		SentToDLQ: map[string]int64{}, FailedToDLQ: map[string]int64{}}
	b.closeCtx, b.cancelAll = context.WithCancel(context.Background())
	if cfg.Store != nil {
		if err := b.restoreDeadLetters(); err != nil {
			return nil, err
		}
	}
	if err := b.restoreArchives(); err != nil {
		return nil, err
	}
	if err := b.restoreReplays(); err != nil {
		return nil, err
	}
	return b, nil
}

// ARN returns the bus ARN: arn:aws:events:<region>:<account>:event-bus/<name>.
func (b *Bus) ARN() string {
	return fmt.Sprintf("arn:aws:events:%s:%s:event-bus/%s", b.cfg.Region, b.cfg.Account, b.cfg.Name)
}

// RuleARN returns a rule's ARN on this bus.
func (b *Bus) RuleARN(rule string) string {
	if b.cfg.Name == DefaultBusName {
		return fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", b.cfg.Region, b.cfg.Account, rule)
	}
	return fmt.Sprintf("arn:aws:events:%s:%s:rule/%s/%s", b.cfg.Region, b.cfg.Account, b.cfg.Name, rule)
}

// Subscribe registers h as the target of every rule whose Target is
// consumer, replacing a previous handler. Events accepted before
// Subscribe are not redelivered.
func (b *Bus) Subscribe(consumer string, h EventHandler) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handlers[consumer] = busTarget{h: h}
}

// SubscribeQueue makes the SQS queue at url (sent to through q) the target
// of every rule whose Target is consumer, as an EventBridge rule with an
// SQS target does: the message body is the event JSON the rule matched. A
// SendMessage error (the queue refuses the body, say) is a failed delivery,
// retried like any target and then dead-lettered (the rule target's DLQ).
// The Interceptor does not apply to queue targets; wrap the consumer
// behind the queue instead.
func (b *Bus) SubscribeQueue(consumer string, q MessageSender, url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handlers[consumer] = busTarget{queue: q, url: url}
}

// SubscribeBus makes another event bus the target of every rule whose
// Target is consumer, as an EventBridge rule with an event bus target does
// (EventBridge user guide, eb-cross-region; in another Region too): each
// matched event is put on that bus with PutEvents (EventBusName busARN, the
// target's ARN; Source, DetailType, Detail, Time and Resources of the event,
// and its trace header), under the rule's ARN as aws:SourceArn. On the
// receiving bus it is a new event (a new id, that bus's account and
// Region).
//
// One hop: a forwarded event is not sent on to another bus. EventBridge
// documents it for buses of other accounts and of one account ("If the
// receiver account sets up a rule that sends events received from a sender
// account on to a third account, these events are not sent to the third
// account"; the same for a third bus of the same account: EventBridge user
// guide, eb-cross-account); ❓ for buses of other Regions it is taken to be
// the same. Locally the delivery's context carries the mark (no field of
// the event does), and the receiving local bus delivers such an event to
// its other targets but to no event bus target (BusStats.NotForwardedAgain),
// so two buses forwarding to each other never send an event back. A request error or a failed entry is a failed
// delivery, retried by the rule's RetryPolicy and then dead-lettered
// (deliveryFailure: a bus that does not exist, a refused source or a
// malformed event is not retried).
func (b *Bus) SubscribeBus(consumer string, to PutEventsAPI, busARN string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handlers[consumer] = busTarget{bus: to, busARN: busARN}
}

type forwardedKey struct{}

// withForwarded marks the PutEvents made under ctx as a bus's delivery to
// an event bus target, from the rule ruleARN.
func withForwarded(ctx context.Context, ruleARN string) context.Context {
	return context.WithValue(ctx, forwardedKey{}, ruleARN)
}

// forwardedBy returns the rule ARN of the bus delivery ctx carries, or "".
func forwardedBy(ctx context.Context) string {
	s, _ := ctx.Value(forwardedKey{}).(string)
	return s
}

// PutEvents accepts up to 10 entries, like EventBridge PutEvents (behaviour
// recorded against AWS; API_PutEvents, eb-putevent-size):
//   - more than 10 (or zero) entries: the whole request fails with a
//     *smithy.GenericAPIError, Code "ValidationException", and for more
//     than 10 AWS's message, the entries listed as AWS lists them (see
//     entriesCountError);
//   - the total size of the entries over MaxEntryBytes (each entry counted
//     as eb-putevent-size does: 14 bytes when Time is set plus the UTF-8
//     bytes of Source, DetailType, Detail and each Resources element): the
//     whole request fails, Code "ValidationException", "Total size of the
//     entries in the request is over the limit." — one oversized entry and
//     several entries that only together pass the limit alike;
//   - an EventBusName that is neither this bus's name nor its ARN (empty
//     means "default"): the whole request fails, Code
//     "ResourceNotFoundException";
//   - per entry, with HTTP-200 semantics (FailedEntryCount, Entries in
//     request order): a missing Source, DetailType or Detail →
//     "InvalidArgument" ("Parameter Source is not valid. Reason: Source is a
//     required argument."), even when every entry lacks them; DetailType
//     over 128 characters → "InvalidArgument"; Source starting with "aws."
//     → "NotAuthorizedForSourceException"; Detail not a JSON object →
//     "MalformedDetail".
//
// Each accepted entry gets a fresh UUID v4 EventId and is routed
// asynchronously; PutEvents does not wait for deliveries (use WaitIdle).
// With a Store, an entry whose deliveries cannot be kept fails with
// "InternalFailure" (retryable). After Close it fails with Code
// "InternalException".
func (b *Bus) PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if params == nil || len(params.Entries) == 0 || len(params.Entries) > MaxPutEventsEntries {
		b.reject()
		var entries []ebtypes.PutEventsRequestEntry
		if params != nil {
			entries = params.Entries
		}
		return nil, entriesCountError(entries)
	}
	total := 0
	for i, e := range params.Entries {
		// TraceHeader: length 1..500 (API_PutEventsRequestEntry), a
		// constraint EventBridge validates on the request as a whole.
		if h := e.TraceHeader; h != nil && (*h == "" || utf8.RuneCountInString(*h) > MaxTraceHeaderLength) {
			b.reject()
			return nil, &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient,
				Message: fmt.Sprintf("1 validation error detected: Value at 'entries.%d.member.traceHeader' failed to satisfy constraint: Member must have length less than or equal to %d and greater than or equal to 1", i+1, MaxTraceHeaderLength)}
		}
		if aws.ToString(e.EventBusName) != "" && !b.isThisBus(aws.ToString(e.EventBusName)) ||
			aws.ToString(e.EventBusName) == "" && b.cfg.Name != DefaultBusName {
			b.reject()
			name := aws.ToString(e.EventBusName)
			if name == "" {
				name = DefaultBusName
			}
			return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException", Fault: smithy.FaultClient,
				Message: fmt.Sprintf("Event bus %s does not exist.", name)}
		}
		total += entrySize(e)
	}
	if total > b.cfg.MaxEntryBytes {
		b.reject()
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient,
			Message: "Total size of the entries in the request is over the limit."}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, &smithy.GenericAPIError{Code: "InternalException", Fault: smithy.FaultServer, Message: "local bus is closed"}
	}
	b.mu.Unlock()

	now := b.cfg.Now().UTC()
	out := &eventbridge.PutEventsOutput{Entries: make([]ebtypes.PutEventsResultEntry, len(params.Entries))}
	type acceptedEvent struct {
		i           int
		raw         json.RawMessage
		traceHeader string
	}
	var accepted []acceptedEvent
	for i, e := range params.Entries {
		code, msg := b.checkEntry(e)
		if code != "" {
			out.Entries[i] = ebtypes.PutEventsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String(msg)}
			out.FailedEntryCount++
			b.mu.Lock()
			b.stats.FailedEntries[code]++
			b.mu.Unlock()
			continue
		}
		id := uuid.NewString()
		t := now
		if e.Time != nil {
			t = e.Time.UTC()
		}
		resources := e.Resources
		if resources == nil {
			resources = []string{}
		}
		raw, err := json.Marshal(eventEnvelope{
			Version: "0", ID: id, DetailType: aws.ToString(e.DetailType), Source: aws.ToString(e.Source),
			Account: b.cfg.Account, Time: t.Format(time.RFC3339), Region: b.cfg.Region,
			Resources: resources, Detail: json.RawMessage(aws.ToString(e.Detail)),
		})
		if err != nil { // Detail was validated; cannot happen
			out.Entries[i] = ebtypes.PutEventsResultEntry{ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String(err.Error())}
			out.FailedEntryCount++
			continue
		}
		out.Entries[i] = ebtypes.PutEventsResultEntry{EventId: aws.String(id)}
		// EventBridge hands the entry's X-Ray TraceHeader to the targets
		// (an SQS target gets it as the AWSTraceHeader system attribute), not
		// inside the event: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-related-service-xray.html
		accepted = append(accepted, acceptedEvent{i, raw, aws.ToString(e.TraceHeader)})
	}
	forwarded := forwardedBy(ctx) != ""
	for _, a := range accepted {
		if err := b.route(a.raw, a.traceHeader, forwarded); err != nil {
			out.Entries[a.i] = ebtypes.PutEventsResultEntry{ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String(err.Error())}
			out.FailedEntryCount++
			b.count(func(s *BusStats) { s.FailedEntries["InternalFailure"]++ })
		}
	}
	return out, nil
}

// eventEnvelope is the event a target receives
// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html).
type eventEnvelope struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

func (b *Bus) isThisBus(name string) bool {
	return name == b.cfg.Name || name == b.ARN()
}

func (b *Bus) reject() {
	b.mu.Lock()
	b.stats.RejectedRequests++
	b.mu.Unlock()
}

// checkEntry returns an entry-level error code and message, or "".
func (b *Bus) checkEntry(e ebtypes.PutEventsRequestEntry) (string, string) {
	source, dt, detail := aws.ToString(e.Source), aws.ToString(e.DetailType), aws.ToString(e.Detail)
	for _, p := range []struct{ name, v string }{{"Source", source}, {"DetailType", dt}, {"Detail", detail}} {
		if p.v == "" {
			return ErrorCodeInvalidArgument, fmt.Sprintf("Parameter %s is not valid. Reason: %s is a required argument.", p.name, p.name)
		}
	}
	if utf8.RuneCountInString(dt) > MaxDetailTypeLength {
		return ErrorCodeInvalidArgument, fmt.Sprintf("Parameter DetailType is not valid. Reason: longer than %d characters.", MaxDetailTypeLength)
	}
	if strings.HasPrefix(source, "aws.") {
		return ErrorCodeNotAuthorizedForSource, fmt.Sprintf("Not authorized for the source %s.", source)
	}
	if v, err := decodeJSON([]byte(detail)); err != nil {
		return ErrorCodeMalformedDetail, "Detail is malformed."
	} else if _, ok := v.(map[string]any); !ok {
		return ErrorCodeMalformedDetail, "Detail is malformed."
	}
	return "", ""
}

// entrySize is an entry's size as eb-putevent-size counts it.
func entrySize(e ebtypes.PutEventsRequestEntry) int {
	size := len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail))
	if e.Time != nil {
		size += 14
	}
	for _, r := range e.Resources {
		size += len(r)
	}
	return size
}

// WaitIdle blocks until no delivery is in flight (retries and backoff
// included), or returns ctx.Err() when ctx ends first. Deliveries started
// by a handler during the wait (a consumer that publishes) are waited for.
func (b *Bus) WaitIdle(ctx context.Context) error {
	for {
		b.mu.Lock()
		if b.inflight == 0 {
			b.mu.Unlock()
			return nil
		}
		if b.idle == nil {
			b.idle = make(chan struct{})
		}
		ch := b.idle
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Drain is WaitIdle (for symmetry with the dev command's shutdown).
func (b *Bus) Drain(ctx context.Context) error { return b.WaitIdle(ctx) }

// Close refuses further PutEvents, cancels the context of in-flight
// deliveries and waits for them, or until ctx ends. Pending retries are
// dead-lettered — or, with a Store, kept for Resume after a restart, as
// EventBridge would still hold them.
func (b *Bus) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancelAll()
	return b.WaitIdle(ctx)
}

// Stats returns a snapshot of the counters.
func (b *Bus) Stats() BusStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.FailedEntries = copyCounts(b.stats.FailedEntries)
	s.Deliveries = copyCounts(b.stats.Deliveries)
	s.Attempts = copyCounts(b.stats.Attempts)
	s.Retries = copyCounts(b.stats.Retries)
	s.DeadLettered = copyCounts(b.stats.DeadLettered)
	s.SentToDLQ = copyCounts(b.stats.SentToDLQ)
	s.FailedToDLQ = copyCounts(b.stats.FailedToDLQ)
	return s
}

// Events returns the JSON of every accepted event, in acceptance order:
// {"version":"0","id":…,"detail-type":…,"source":…,"account":…,
// "time":"2006-01-02T15:04:05Z","region":…,"resources":[…],"detail":{…}}.
func (b *Bus) Events() []json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]json.RawMessage(nil), b.accepted...)
}

// ForwardedEvents returns the JSON of every accepted event that another
// bus's rule forwarded to this bus (SubscribeBus on that bus), in
// acceptance order: the part of Events that was not put on this bus
// directly.
func (b *Bus) ForwardedEvents() []json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]json.RawMessage(nil), b.forwardedIn...)
}

// DeadLetters returns the dead-lettered deliveries in order.
func (b *Bus) DeadLetters() []DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]DeadLetter(nil), b.dead...)
}

func copyCounts(m map[string]int64) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
