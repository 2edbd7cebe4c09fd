package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// EventBridgeAPI is the one EventBridge method the Publisher calls, with the
// SDK's exact signature: *eventbridge.Client satisfies it, tests fake it.
// Implementations must be safe for concurrent use.
type EventBridgeAPI interface {
	PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// MaxEntriesPerRequest is the PutEvents limit on entries per call. Source:
// https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html
const MaxEntriesPerRequest = 10

// PublishStatus is the outcome class of publishing one envelope.
type PublishStatus int

// Publish outcomes.
const (
	// RetryableFailure: not accepted, may succeed later (throttling, internal
	// failure, unknown code, whole-call error, budget exhausted). The outbox
	// record stays pending.
	RetryableFailure PublishStatus = iota
	// Published: EventBridge accepted the entry and returned an EventId.
	Published
	// PermanentFailure: will never be accepted as is (bad detail, not
	// authorized for the source, entry too large...). The record is parked.
	PermanentFailure
)

// String returns the status name.
func (s PublishStatus) String() string {
	switch s {
	case Published:
		return "Published"
	case PermanentFailure:
		return "PermanentFailure"
	}
	return "RetryableFailure"
}

// Error codes the Publisher sets itself (besides EventBridge's ErrorCode values).
const (
	// CodeEntryTooLarge: the entry alone exceeds MaxEntryBytes; never sent.
	CodeEntryTooLarge = "EntryTooLarge"
	// CodeInvalidEnvelope: the envelope does not validate or encode; never sent.
	CodeInvalidEnvelope = "InvalidEnvelope"
	// CodeRequestFailed: the PutEvents call itself failed (after the SDK's
	// own retries) without an API error code.
	CodeRequestFailed = "RequestFailed"
	// CodeNoResult: the response had no usable result for the entry.
	CodeNoResult = "NoResult"
	// CodePoisonRecord: a stream record could not be decoded as an outbox record.
	CodePoisonRecord = "PoisonRecord"
	// CodeUndeliverableText: the detail holds characters Amazon SQS refuses
	// in a message body (e.g. U+FFFE, U+FFFF; stored before the writer
	// refused them, or by another writer). Every consumer receives events
	// through an SQS queue, so such an event would be accepted by
	// EventBridge and then never delivered: it is parked instead, never sent.
	CodeUndeliverableText = "UndeliverableText"
	// CodeRequestRejected: EventBridge rejected a PutEvents request that
	// carried this entry alone as too large (HTTP 413, or a
	// ValidationException about the request size): the entry will never be
	// accepted as is, so it is parked with the service's reason. A larger
	// request rejected that way is split and its parts re-sent (see Publish).
	CodeRequestRejected = "RequestRejected"
	// CodeHeldBack: the entry was not sent because an earlier event of the
	// same aggregate was not published in this invocation (promise I4: an
	// aggregate's events never overtake each other); retryable. Set by the
	// Relay and the reconciler, never by Publish.
	CodeHeldBack = "HeldBack"
	// CodeNoTime: the context (the invocation deadline less the marking
	// reserve, see MarkerConfig.Reserve) ended before the entry could be
	// sent; retryable.
	CodeNoTime = "NoTimeLeft"
)

// permanentCodes are the PutEvents entry error codes that will not succeed
// on retry. Source:
// https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html
var permanentCodes = map[string]bool{
	"AccessDeniedException":               true,
	"InvalidAccountIdException":           true,
	"InvalidArgument":                     true,
	"MalformedDetail":                     true,
	"RedactionFailure":                    true,
	"NotAuthorizedForSourceException":     true,
	"NotAuthorizedForDetailTypeException": true,
	CodeEntryTooLarge:                     true,
	CodeInvalidEnvelope:                   true,
	CodeUndeliverableText:                 true,
	CodePoisonRecord:                      true,
	CodeRequestRejected:                   true,
}

// IsPermanentCode reports whether a PutEvents entry ErrorCode is permanent.
// InternalFailure, ThrottlingException and any unknown code are retryable.
func IsPermanentCode(code string) bool { return permanentCodes[code] }

// Result is the outcome of publishing one envelope.
type Result struct {
	Status PublishStatus
	// EventID is the EventBridge event id; set only when Status is Published.
	EventID string
	// ErrorCode and ErrorMessage describe the last failure.
	ErrorCode    string
	ErrorMessage string
	// Attempts is how many PutEvents calls carried the entry (0 if never sent).
	Attempts int
	// Trace is the span context of the entry's publish span (its
	// PutEvents TraceHeader), the parent of its mark or park span; invalid
	// when the entry carried no trace context and tracing is off.
	Trace trace.SpanContext
}

// PublisherConfig configures a Publisher. Zero values take the defaults.
type PublisherConfig struct {
	// EventBusName is the bus name or ARN (PutEventsRequestEntry.EventBusName). Required.
	EventBusName string
	// Source is the entries' Source (config.EnvEventSource): the team's own
	// reverse-DNS name, the one its writers and consumers use. Required.
	// EventBridge rejects sources starting with "aws.".
	Source string
	// MaxEntryBytes is the per-entry size limit in bytes, measured with
	// outbox.EntrySize. Default config.DefaultMaxEntryBytes (262144).
	MaxEntryBytes int
	// MaxRequestBytes bounds the sum of entry sizes in one PutEvents call, in
	// bytes. Default 262144 (256 KB), or MaxEntryBytes if that is larger.
	MaxRequestBytes int
	// MaxAttempts bounds the PutEvents calls carrying one entry. Default 4.
	MaxAttempts int
	// RetryBudget bounds the time one Publish call spends, retries and the
	// last call included: no PutEvents call outlives it. Default 20 s. A
	// context deadline shortens it (the Relay passes the invocation deadline
	// less MarkerConfig.Reserve).
	RetryBudget time.Duration
	// InitialInterval and MaxInterval shape the exponential backoff (full
	// jitter: each wait uniform in [0, the capped delay]) between attempts.
	// Defaults 100 ms and 2 s.
	InitialInterval time.Duration
	MaxInterval     time.Duration
	// CallTimeout bounds each PutEvents call. Default 5 s.
	CallTimeout time.Duration
	// Concurrency bounds the PutEvents calls in flight per Publish. Default 4.
	Concurrency int
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
}

// DefaultMaxRequestBytes is the PutEvents request size limit this package
// assumes: 256 KB. Source:
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html
const DefaultMaxRequestBytes = 256 * 1024

func (c *PublisherConfig) setDefaults() {
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = config.DefaultMaxEntryBytes
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = max(DefaultMaxRequestBytes, c.MaxEntryBytes)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 4
	}
	if c.RetryBudget == 0 {
		c.RetryBudget = 20 * time.Second
	}
	if c.InitialInterval == 0 {
		c.InitialInterval = 100 * time.Millisecond
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = 2 * time.Second
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration error.
func (c PublisherConfig) Validate() error {
	switch {
	case c.EventBusName == "":
		return errors.New("relay: PublisherConfig.EventBusName is required")
	case c.Source == "":
		return errors.New("relay: PublisherConfig.Source is required: the EventBridge source of your outbox (config.EnvEventSource), e.g. com.example.wallet")
	case strings.HasPrefix(c.Source, "aws."):
		return fmt.Errorf("relay: PublisherConfig.Source %q starts with \"aws.\", which EventBridge refuses for PutEvents", c.Source)
	case c.MaxEntryBytes < 1024:
		return fmt.Errorf("relay: MaxEntryBytes %d is too small", c.MaxEntryBytes)
	case c.MaxRequestBytes < c.MaxEntryBytes:
		return fmt.Errorf("relay: MaxRequestBytes %d is below MaxEntryBytes %d", c.MaxRequestBytes, c.MaxEntryBytes)
	case c.MaxAttempts < 1 || c.MaxAttempts > 20:
		return fmt.Errorf("relay: MaxAttempts %d out of range 1..20", c.MaxAttempts)
	case c.RetryBudget < 0 || c.InitialInterval < 0 || c.MaxInterval < 0 || c.CallTimeout < 0:
		return errors.New("relay: durations must not be negative")
	case c.Concurrency < 1:
		return fmt.Errorf("relay: Concurrency %d must be >= 1", c.Concurrency)
	}
	return nil
}

// Publisher sends outbox envelopes to EventBridge with PutEvents, packing
// them into calls of at most 10 entries and MaxRequestBytes, and retrying
// only the entries that failed with a retryable code. It is safe for
// concurrent use.
type Publisher struct {
	client EventBridgeAPI
	cfg    PublisherConfig
	sleep  func(context.Context, time.Duration) error
}

// NewPublisher returns a Publisher, or an error if cfg does not validate.
func NewPublisher(client EventBridgeAPI, cfg PublisherConfig) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("relay: NewPublisher: nil EventBridge client")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Publisher{client: client, cfg: cfg, sleep: sleepCtx}, nil
}

// Config returns the publisher's effective configuration.
func (p *Publisher) Config() PublisherConfig { return p.cfg }

// entry is one envelope being published.
type entry struct {
	idx  int
	req  ebtypes.PutEventsRequestEntry
	size int
}

// Publish sends envs and returns one Result per envelope, in the same order.
// It never returns an error: a failed call makes its entries
// RetryableFailure. Entries accepted by EventBridge are never re-sent; an
// entry that failed with a retryable code is re-sent (only it) up to
// MaxAttempts times with exponential backoff and jitter, within RetryBudget
// and the context's deadline: Publish returns by min(start + RetryBudget,
// ctx deadline), cutting a call still in flight then (its entries are
// RetryableFailure: EventBridge may have accepted them, a re-send is
// absorbed by consumer dedup), and starts no retry with less than half a
// CallTimeout left. If ctx is already done nothing is sent and every entry
// is RetryableFailure with ErrorCode CodeNoTime. An entry over MaxEntryBytes
// or an envelope that does not validate is a PermanentFailure and is never
// sent.
//
// A request refused as a whole for its size (HTTP 413, or a
// ValidationException about the request size: the bus's real limit can be
// below MaxRequestBytes) is never re-sent as it was: it is split in halves
// at once and each half sent (recursively, at most 2n−1 calls for n
// entries, each counted in Attempts); an entry refused that way even alone
// is a PermanentFailure with ErrorCode CodeRequestRejected and the service's
// reason, so the caller parks it.
//
// Entries: Source from config, DetailType = event type, Detail =
// Envelope.Detail(), Time = occurred_at, EventBusName from config.
//
// Tracing (pkg/outboxtrace): each envelope gets a publish span whose parent
// is the envelope's stored trace context (linked to ctx's span, the relay
// batch or reconciler sweep; named "outbox resend" under WithResend), ended
// with the entry's status, error code, attempts and EventBridge EventId;
// the entry's TraceHeader is that span in X-Ray format, so EventBridge hands
// the trace to the targets. Tracing off: no span, and the TraceHeader only
// forwards a stored context.
func (p *Publisher) Publish(ctx context.Context, envs []outbox.Envelope) []Result {
	return p.publish(ctx, envs, nil)
}

// builtEntry is an envelope turned into a request entry (ok), or the
// permanent failure that keeps it from being sent.
type builtEntry struct {
	e   entry
	res Result
	ok  bool
}

// publish is Publish with the entries already built (PublishInOrder builds
// them once for its schedule); built, when not nil, has envs' length and
// built[i].e.idx is ignored.
func (p *Publisher) publish(ctx context.Context, envs []outbox.Envelope, built []builtEntry) []Result {
	results := make([]Result, len(envs))
	pt := startPublishSpans(ctx, envs)
	defer pt.end(results)
	pending := make([]entry, 0, len(envs))
	for i, env := range envs {
		var b builtEntry
		if built != nil {
			b = built[i]
		} else {
			b.e, b.res, b.ok = p.buildEntry(i, env)
		}
		e, res, ok := b.e, b.res, b.ok
		if !ok {
			results[i] = res
			continue
		}
		e.idx = i
		if h := pt.header(i); h != "" {
			e.req.TraceHeader = aws.String(h)
		}
		pending = append(pending, e)
	}
	if len(pending) == 0 {
		return results
	}
	if err := ctx.Err(); err != nil {
		for _, e := range pending {
			results[e.idx] = Result{Status: RetryableFailure, ErrorCode: CodeNoTime, ErrorMessage: "not sent: " + err.Error()}
		}
		p.cfg.Logger.WarnContext(ctx, "relay: no time left to publish", "entries", len(pending), "error", err)
		return results
	}

	start := time.Now()
	deadline := start.Add(p.cfg.RetryBudget)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	bo := retry.New(p.cfg.InitialInterval, p.cfg.MaxInterval)

	for attempt := 1; ; attempt++ {
		p.sendAll(ctx, pending, results)
		var retry []entry
		for _, e := range pending {
			if results[e.idx].Status == RetryableFailure {
				retry = append(retry, e)
			}
		}
		if len(retry) == 0 || attempt >= p.cfg.MaxAttempts || ctx.Err() != nil {
			break
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop || time.Now().Add(wait).Add(p.cfg.CallTimeout/2).After(deadline) {
			p.cfg.Logger.WarnContext(ctx, "relay: publish retry budget exhausted", "remaining", len(retry), "attempt", attempt)
			break
		}
		if err := p.sleep(ctx, wait); err != nil {
			break
		}
		pending = retry
	}
	return results
}

// buildEntry turns an envelope into a request entry, or a permanent failure.
func (p *Publisher) buildEntry(i int, env outbox.Envelope) (entry, Result, bool) {
	if err := env.Validate(); err != nil {
		return entry{}, Result{Status: PermanentFailure, ErrorCode: CodeInvalidEnvelope, ErrorMessage: err.Error()}, false
	}
	detail, err := env.Detail()
	if err != nil {
		return entry{}, Result{Status: PermanentFailure, ErrorCode: CodeInvalidEnvelope, ErrorMessage: err.Error()}, false
	}
	if err := sqsmsg.CheckJSON(string(detail), sqsmsg.MaxMaxBytes); errors.Is(err, sqsmsg.ErrInvalidContents) {
		return entry{}, Result{Status: PermanentFailure, ErrorCode: CodeUndeliverableText, ErrorMessage: err.Error()}, false
	}
	size := outbox.EntrySize(p.cfg.Source, env.EventType, detail)
	if size > p.cfg.MaxEntryBytes {
		return entry{}, Result{
			Status:       PermanentFailure,
			ErrorCode:    CodeEntryTooLarge,
			ErrorMessage: fmt.Sprintf("entry is %d bytes, limit %d", size, p.cfg.MaxEntryBytes),
		}, false
	}
	return entry{
		idx:  i,
		size: size,
		req: ebtypes.PutEventsRequestEntry{
			EventBusName: aws.String(p.cfg.EventBusName),
			Source:       aws.String(p.cfg.Source),
			DetailType:   aws.String(env.EventType),
			Detail:       aws.String(string(detail)),
			Time:         aws.Time(env.OccurredAt),
		},
	}, Result{}, true
}

// Pack splits sizes (entry sizes in bytes, in order) into consecutive groups
// of at most MaxEntriesPerRequest entries whose sizes sum to at most
// maxRequestBytes, and returns each group's [start, end) bounds. Each size
// must be <= maxRequestBytes.
func Pack(sizes []int, maxRequestBytes int) [][2]int {
	var groups [][2]int
	start, total := 0, 0
	for i, s := range sizes {
		if i > start && (i-start == MaxEntriesPerRequest || total+s > maxRequestBytes) {
			groups = append(groups, [2]int{start, i})
			start, total = i, 0
		}
		total += s
	}
	if start < len(sizes) {
		groups = append(groups, [2]int{start, len(sizes)})
	}
	return groups
}

// sendAll sends the entries in packed calls, at most Concurrency at a time,
// and records each entry's result.
func (p *Publisher) sendAll(ctx context.Context, entries []entry, results []Result) {
	sizes := make([]int, len(entries))
	for i, e := range entries {
		sizes[i] = e.size
	}
	groups := Pack(sizes, p.cfg.MaxRequestBytes)
	sem := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, g := range groups {
		batch := entries[g[0]:g[1]]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p.send(ctx, batch, results)
		}()
	}
	wg.Wait()
}

// send makes one PutEvents call. Each goroutine writes only the results of
// its own entries, so no lock is needed.
func (p *Publisher) send(ctx context.Context, batch []entry, results []Result) {
	in := &eventbridge.PutEventsInput{Entries: make([]ebtypes.PutEventsRequestEntry, len(batch))}
	for i, e := range batch {
		in.Entries[i] = e.req
		results[e.idx].Attempts++
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	out, err := p.client.PutEvents(callCtx, in)
	cancel()
	if err != nil {
		code, msg := CodeRequestFailed, err.Error()
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() != "" {
			code = apiErr.ErrorCode()
		}
		if reason, ok := requestTooLarge(err); ok {
			if len(batch) > 1 {
				// The request is refused as a whole: re-sending it as is
				// would be refused again, every attempt. Split it and send
				// the halves (at most 2n-1 calls for n entries).
				p.cfg.Logger.WarnContext(ctx, "relay: PutEvents request rejected as too large, splitting it", "entries", len(batch), "error_code", code, "error", msg)
				half := len(batch) / 2
				p.send(ctx, batch[:half], results)
				p.send(ctx, batch[half:], results)
				return
			}
			e := batch[0]
			p.cfg.Logger.WarnContext(ctx, "relay: PutEvents rejected a request of one entry as too large, the entry will be parked", "error_code", code, "error", msg)
			results[e.idx] = Result{Status: PermanentFailure, ErrorCode: CodeRequestRejected, ErrorMessage: reason, Attempts: results[e.idx].Attempts}
			return
		}
		p.cfg.Logger.WarnContext(ctx, "relay: PutEvents call failed", "entries", len(batch), "error_code", code, "error", msg)
		for _, e := range batch {
			results[e.idx] = Result{Status: RetryableFailure, ErrorCode: code, ErrorMessage: msg, Attempts: results[e.idx].Attempts}
		}
		return
	}
	if out == nil || len(out.Entries) != len(batch) {
		n := 0
		if out != nil {
			n = len(out.Entries)
		}
		msg := fmt.Sprintf("PutEvents returned %d result entries for %d request entries", n, len(batch))
		p.cfg.Logger.WarnContext(ctx, "relay: "+msg)
		for _, e := range batch {
			results[e.idx] = Result{Status: RetryableFailure, ErrorCode: CodeNoResult, ErrorMessage: msg, Attempts: results[e.idx].Attempts}
		}
		return
	}
	for i, e := range batch {
		r := out.Entries[i]
		res := Result{Attempts: results[e.idx].Attempts}
		code := aws.ToString(r.ErrorCode)
		switch {
		case code == "" && aws.ToString(r.EventId) != "":
			res.Status, res.EventID = Published, aws.ToString(r.EventId)
		case code == "":
			res.Status, res.ErrorCode, res.ErrorMessage = RetryableFailure, CodeNoResult, "result entry has neither EventId nor ErrorCode"
		case IsPermanentCode(code):
			res.Status, res.ErrorCode, res.ErrorMessage = PermanentFailure, code, aws.ToString(r.ErrorMessage)
		default:
			res.Status, res.ErrorCode, res.ErrorMessage = RetryableFailure, code, aws.ToString(r.ErrorMessage)
		}
		results[e.idx] = res
	}
}

// requestTooLarge reports whether a failed PutEvents call was refused as a
// whole for its size, and the reason to record: HTTP 413 (Request Entity Too
// Large), or a ValidationException whose message is about the request size
// (EventBridge: "Total size of the entries in the request is over the
// limit."; API_PutEvents, eb-putevent-size). Such a request fails the same
// way on every retry. Other whole-call errors (throttling, 5xx, access
// denied, a missing bus) say nothing about one entry and stay retryable.
func requestTooLarge(err error) (string, bool) {
	code, msg := "", err.Error()
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code, msg = apiErr.ErrorCode(), apiErr.ErrorMessage()
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() == http.StatusRequestEntityTooLarge {
		return fmt.Sprintf("HTTP 413 %s: %s", code, msg), true
	}
	if code == "ValidationException" {
		m := strings.ToLower(msg)
		for _, hint := range []string{"size", "too large", "too big", "over the limit", "exceed"} {
			if strings.Contains(m, hint) {
				return code + ": " + msg, true
			}
		}
	}
	return "", false
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }
