package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// The cloud-latency level: the real local pipeline with AWS's hop latencies
// injected at the boundaries the local runtime owns, so that commit →
// applied can be predicted for AWS and split into what AWS's hops take and
// what our code and our own calls add on top.

// z99 is the standard normal quantile of 0.99.
const z99 = 2.3263478740408408

// Hop is a published latency of one AWS hop, modelled as a lognormal
// fitted to its median and 99th percentile (mu = ln p50, sigma =
// ln(p99/p50)/z0.99). P10 and P90, when the source gives them, are kept to
// show how well the fit holds; they do not enter the fit.
type Hop struct {
	Name         string  `json:"name"`
	P10Ms        float64 `json:"published_p10_ms,omitempty"`
	P50Ms        float64 `json:"published_p50_ms"`
	P90Ms        float64 `json:"published_p90_ms,omitempty"`
	P99Ms        float64 `json:"published_p99_ms"`
	Source       string  `json:"source"`
	Assumption   string  `json:"assumption,omitempty"`
	FittedP90Ms  float64 `json:"fitted_p90_ms"`
	FittedMeanMs float64 `json:"fitted_mean_ms"`
	FittedSigma  float64 `json:"fitted_sigma"`
	dist         distuv.LogNormal
	fitted       bool
}

func (h *Hop) fit() {
	if h.fitted {
		return
	}
	mu := math.Log(h.P50Ms)
	sigma := math.Log(h.P99Ms/h.P50Ms) / z99
	h.dist = distuv.LogNormal{Mu: mu, Sigma: sigma}
	h.FittedSigma = math.Round(sigma*1000) / 1000
	h.FittedP90Ms = math.Round(h.dist.Quantile(0.90)*10) / 10
	h.FittedMeanMs = math.Round(h.dist.Mean()*10) / 10
	h.fitted = true
}

// Quantile returns the fitted distribution's q quantile (0 < q < 1).
func (h *Hop) Quantile(q float64) time.Duration {
	h.fit()
	return time.Duration(h.dist.Quantile(q) * float64(time.Millisecond))
}

// sample draws one latency with r.
func (h *Hop) sample(r *rand.Rand) time.Duration {
	h.fit()
	d := h.dist
	d.Src = r
	return time.Duration(d.Rand() * float64(time.Millisecond))
}

// Sources of the injected hops.
const (
	// SourceBiteSized is "Serverless Messaging: Latency Compared"
	// (Bite-Sized Serverless, tests of 4-5 September 2022 and, for
	// EventBridge, the February 2023 update; eu-west-1; 1,024 messages per
	// service, producer timestamp before the publish call → consumer Lambda).
	SourceBiteSized = "https://bitesizedserverless.com/bite/serverless-messaging-latency-compared/"
	// SourceDynamoDBLatency: on-demand tables "deliver the same
	// single-digit millisecond latency" as provisioned ones.
	SourceDynamoDBLatency = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html"
	// SourceStreamPolling: Lambda polls DynamoDB stream shards "at a base
	// rate of 4 times per second".
	SourceStreamPolling = "https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html"
)

// CloudHops are the hops make bench injects.
type CloudHops struct {
	// Stream: commit (occurred_at, stamped before the transaction, as the
	// source stamps before its write) → relay invocation by the stream
	// event source mapping. Records committed in the same PollSlot share
	// one draw (one poll of the shard picks them up together).
	Stream Hop `json:"stream_to_lambda"`
	// EventBridge: PutEvents → the rule's target. The source measures an
	// async Lambda target; our targets are SQS queues, for which no
	// published figure was found: the Lambda figure stands in for it (an
	// async invoke queues too, so it is not an underestimate).
	EventBridge Hop `json:"eventbridge_to_target"`
	// SQS: SendMessage → the consumer's invocation by its SQS event source
	// mapping.
	SQS Hop `json:"sqs_to_lambda"`
	// DynamoDB and DynamoDBTransact: one call's round trip from a Lambda
	// function (every DynamoDB call but DynamoDB Streams, whose GetRecords
	// are inside Stream); TransactWriteItems takes two round trips inside
	// DynamoDB (prepare + commit).
	DynamoDB         Hop `json:"dynamodb_call"`
	DynamoDBTransact Hop `json:"dynamodb_transact_write_items"`
	// PollSlot groups stream records for one draw (AWS: 4 polls per
	// second, 250 ms).
	PollSlot time.Duration `json:"poll_slot_ns"`
	// Seed seeds every draw.
	Seed uint64 `json:"seed"`
}

// DefaultCloudHops are the published eu-west-1 measurements (Stream,
// EventBridge, SQS) and the documented single-digit-millisecond DynamoDB
// call latency, with the p99s we assume for it.
func DefaultCloudHops() CloudHops {
	h := CloudHops{
		Stream:      Hop{Name: "DynamoDB Streams → Lambda (event source mapping)", P10Ms: 118, P50Ms: 213, P90Ms: 341, P99Ms: 552, Source: SourceBiteSized},
		EventBridge: Hop{Name: "EventBridge → target", P10Ms: 113, P50Ms: 148, P90Ms: 241, P99Ms: 387, Source: SourceBiteSized, Assumption: "measured to an async Lambda target; used for our SQS targets"},
		SQS:         Hop{Name: "SQS standard → Lambda (event source mapping)", P10Ms: 13.7, P50Ms: 16.2, P90Ms: 33.8, P99Ms: 105, Source: SourceBiteSized},
		DynamoDB: Hop{Name: "DynamoDB call (GetItem, PutItem, UpdateItem, Query, BatchExecuteStatement …)", P50Ms: 5, P99Ms: 15, Source: SourceDynamoDBLatency,
			Assumption: "AWS documents single-digit milliseconds; p50 5 ms and p99 15 ms are our choice"},
		DynamoDBTransact: Hop{Name: "DynamoDB TransactWriteItems", P50Ms: 10, P99Ms: 30, Source: SourceDynamoDBLatency,
			Assumption: "two round trips inside DynamoDB (prepare + commit): twice the single call"},
		PollSlot: 250 * time.Millisecond,
		Seed:     16,
	}
	for _, p := range []*Hop{&h.Stream, &h.EventBridge, &h.SQS, &h.DynamoDB, &h.DynamoDBTransact} {
		p.fit()
	}
	return h
}

// Cloud injects CloudHops into a devstack and records, per outbox event,
// the moments that split commit → applied into AWS's hops and our share.
// Use one Cloud per stack (Apply before devstack.Start). Safe for
// concurrent use.
type Cloud struct {
	hops CloudHops

	mu     sync.Mutex
	rng    *rand.Rand
	slots  map[int64]time.Duration            // stream poll slot → its draw
	calls  map[int64]map[string]time.Duration // PutEvents call → target → draw
	nextID int64
	callOf map[string]callRef // event id → its PutEvents call
	ev     map[string]*cloudSpan
	ddb    map[string]time.Duration // injected DynamoDB latency by operation
	ddbN   map[string]int64
	fns    map[string]*fnTime // "relay", "consumer", "api" (calls outside both)
	// markerConsumers are the consumers seen committing a dedup marker:
	// their apply is the marker's commit (consumerSpan.committed).
	markerConsumers map[string]bool
}

// fnTime accumulates one function's invocations: their wall time, the time
// its DynamoDB calls spent in the local server, and the latency injected
// into them (all ns).
type fnTime struct {
	invocations, wall, local, injected int64
}

type fnKey struct{}

// FunctionTime is one function's time as measured here and as it would be
// on AWS: Own = wall − local store time − injected latency (our code's
// time); AWS = Own + injected (the local store's time replaced by AWS's).
type FunctionTime struct {
	Invocations int64   `json:"invocations"`
	WallMs      float64 `json:"wall_ms"`
	LocalMs     float64 `json:"local_store_ms"`
	InjectedMs  float64 `json:"injected_ms"`
	OwnMs       float64 `json:"own_ms"`
}

type cloudSpan struct {
	commit     time.Time
	streamHop  time.Duration // injected
	relayStart time.Time
	published  time.Time
	consumers  map[string]*consumerSpan
}

type consumerSpan struct {
	targetHop time.Duration // injected EventBridge + SQS
	start     time.Time     // first attempt
	applied   time.Time     // first success of the handler (acknowledged)
	committed time.Time     // its dedup marker's transaction committed
	attempts  int
}

// appliedAt is when consumer name applied the event of cs: its marker's
// commit for a consumer that writes markers (zero until then: an early
// event its resequencer buffered is acknowledged first, applied after its
// predecessor), else its handler's first success. c.mu must be held.
func (c *Cloud) appliedAt(name string, cs *consumerSpan) time.Time {
	if c.markerConsumers[name] {
		return cs.committed
	}
	return cs.applied
}

// NewCloud returns a Cloud injecting hops.
func NewCloud(hops CloudHops) *Cloud {
	for _, p := range []*Hop{&hops.Stream, &hops.EventBridge, &hops.SQS, &hops.DynamoDB, &hops.DynamoDBTransact} {
		p.fit()
	}
	if hops.PollSlot <= 0 {
		hops.PollSlot = 250 * time.Millisecond
	}
	return &Cloud{
		hops: hops, rng: rand.New(rand.NewPCG(hops.Seed, hops.Seed^0x9e3779b97f4a7c15)),
		slots: map[int64]time.Duration{}, calls: map[int64]map[string]time.Duration{},
		fns: map[string]*fnTime{"relay": {}, "consumer": {}, "api": {}},

		markerConsumers: map[string]bool{},
		callOf:          map[string]callRef{}, ev: map[string]*cloudSpan{}, ddb: map[string]time.Duration{}, ddbN: map[string]int64{},
	}
}

// Hops returns the injected hops (fitted).
func (c *Cloud) Hops() CloudHops { return c.hops }

// Apply wires the injection and the recording into o, around whatever o
// already wraps: the DynamoDB call latency (SDK middleware on every
// client), the stream hold (StreamDeliverAt), the relay invocation time
// (WrapStream), the publish time (WrapEventBridge), the EventBridge + SQS
// delay before each consumer queue (WrapQueueTarget) and each consumer's
// first attempt and first success (ConsumerInterceptor).
func (c *Cloud) Apply(o *devstack.Options) {
	prevCfg := o.AWSConfig
	o.AWSConfig = func(cfg *aws.Config) {
		if prevCfg != nil {
			prevCfg(cfg)
		}
		cfg.APIOptions = append(cfg.APIOptions, c.registerDynamoDB, c.registerMarkers)
	}
	o.StreamDeliverAt = c.deliverAt
	prevStream := o.WrapStream
	o.WrapStream = func(h localrt.StreamHandler) localrt.StreamHandler {
		h = c.wrapStream(h)
		if prevStream != nil {
			h = prevStream(h)
		}
		return h
	}
	prevEB := o.WrapEventBridge
	o.WrapEventBridge = func(eb relay.EventBridgeAPI) relay.EventBridgeAPI {
		eb = &cloudEB{next: eb, c: c}
		if prevEB != nil {
			eb = prevEB(eb)
		}
		return eb
	}
	prevQ := o.WrapQueueTarget
	o.WrapQueueTarget = func(consumer string, q localrt.MessageSender) localrt.MessageSender {
		if prevQ != nil {
			q = prevQ(consumer, q)
		}
		return &cloudQueue{next: q, c: c, consumer: consumer}
	}
	prevI := o.ConsumerInterceptor
	o.ConsumerInterceptor = func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next localrt.EventHandler) error {
		id := detailEventID(ev.Detail)
		start := time.Now()
		ctx = context.WithValue(ctx, fnKey{}, c.fns["consumer"])
		var err error
		if prevI != nil {
			err = prevI(ctx, consumer, ev, attempt, next)
		} else {
			err = next(ctx, ev)
		}
		end := time.Now()
		c.mu.Lock()
		c.fns["consumer"].invocations++
		c.fns["consumer"].wall += int64(end.Sub(start))
		c.mu.Unlock()
		if id != "" {
			c.mu.Lock()
			cs := c.span(id).consumer(consumer)
			cs.attempts++
			if cs.start.IsZero() {
				cs.start = start
			}
			if err == nil && cs.applied.IsZero() {
				cs.applied = end
			}
			c.mu.Unlock()
		}
		return err
	}
}

// span returns id's span; c.mu must be held.
func (c *Cloud) span(id string) *cloudSpan {
	s := c.ev[id]
	if s == nil {
		s = &cloudSpan{consumers: map[string]*consumerSpan{}}
		c.ev[id] = s
	}
	return s
}

func (s *cloudSpan) consumer(name string) *consumerSpan {
	cs := s.consumers[name]
	if cs == nil {
		cs = &consumerSpan{}
		s.consumers[name] = cs
	}
	return cs
}

// registerMarkers records each consumer's dedup marker commit (after the
// injected latency: registerMarkerCommits is outermost).
func (c *Cloud) registerMarkers(stack *middleware.Stack) error {
	return registerMarkerCommits(stack, fmt.Sprintf("bench.CloudMarkers.%p", c), func(consumer, eventID string, at time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.markerConsumers[consumer] = true
		if cs := c.span(eventID).consumer(consumer); cs.committed.IsZero() {
			cs.committed = at
		}
	})
}

// registerDynamoDB adds the DynamoDB call latency to a client's stack: a
// sleep per attempt, after the local server answered (DynamoDB Streams
// calls are left alone: they are inside the stream hop).
func (c *Cloud) registerDynamoDB(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("bench.CloudDynamoDBLatency",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleDeserialize(ctx, in)
			local := time.Since(start)
			if awsmiddleware.GetServiceID(ctx) != "DynamoDB" {
				return out, md, err
			}
			op := awsmiddleware.GetOperationName(ctx)
			h := &c.hops.DynamoDB
			if op == "TransactWriteItems" {
				h = &c.hops.DynamoDBTransact
			}
			c.mu.Lock()
			d := h.sample(c.rng)
			c.ddb[op] += d
			c.ddbN[op]++
			f, _ := ctx.Value(fnKey{}).(*fnTime)
			if f == nil {
				f = c.fns["api"]
			}
			f.local += int64(local)
			f.injected += int64(d)
			c.mu.Unlock()
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return out, md, ctx.Err()
			case <-t.C:
			}
			return out, md, err
		}), middleware.After)
}

// deliverAt is the stream hold: commit + the draw of the record's poll slot
// for an outbox INSERT, no hold for anything else.
func (c *Cloud) deliverAt(raw json.RawMessage) time.Time {
	var r events.DynamoDBEventRecord
	if json.Unmarshal(raw, &r) != nil || r.EventName != string(events.DynamoDBOperationTypeInsert) {
		return time.Time{}
	}
	id, at := streamEventID(r.Change.NewImage)
	if id == "" || at.IsZero() {
		return time.Time{}
	}
	slot := at.UnixNano() / int64(c.hops.PollSlot)
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.slots[slot]
	if !ok {
		d = c.hops.Stream.sample(c.rng)
		c.slots[slot] = d
	}
	s := c.span(id)
	if s.commit.IsZero() {
		s.commit, s.streamHop = at, d
	}
	return at.Add(d)
}

func streamEventID(img map[string]events.DynamoDBAttributeValue) (string, time.Time) {
	idv, ok1 := img[outbox.AttrEventID]
	atv, ok2 := img[outbox.AttrOccurredAt]
	if !ok1 || !ok2 || idv.DataType() != events.DataTypeString || atv.DataType() != events.DataTypeString {
		return "", time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, atv.String())
	if err != nil {
		return "", time.Time{}
	}
	return idv.String(), at
}

func (c *Cloud) wrapStream(h localrt.StreamHandler) localrt.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		now := time.Now()
		c.mu.Lock()
		for _, r := range ev.Records {
			if id, at := streamEventID(r.Change.NewImage); id != "" && r.EventName == string(events.DynamoDBOperationTypeInsert) {
				s := c.span(id)
				if s.commit.IsZero() {
					s.commit = at
				}
				if s.relayStart.IsZero() {
					s.relayStart = now
				}
			}
		}
		c.mu.Unlock()
		resp, err := h(context.WithValue(ctx, fnKey{}, c.fns["relay"]), ev)
		c.mu.Lock()
		c.fns["relay"].invocations++
		c.fns["relay"].wall += int64(time.Since(now))
		c.mu.Unlock()
		return resp, err
	}
}

func detailEventID(detail json.RawMessage) string {
	var env struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(detail, &env) != nil {
		return ""
	}
	return env.EventID
}

// cloudEB records when each entry's PutEvents call returned and tags the
// call, so every target of the call's entries shares one draw.
type cloudEB struct {
	next relay.EventBridgeAPI
	c    *Cloud
}

// callRef is an entry's PutEvents call, when the call started and the
// entry's index in it.
type callRef struct {
	id    int64
	start time.Time
	index int
}

func (e *cloudEB) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	e.c.mu.Lock()
	e.c.nextID++
	call := e.c.nextID
	ids := make([]string, len(in.Entries))
	start := time.Now()
	for i, en := range in.Entries {
		ids[i] = detailEventID(json.RawMessage(aws.ToString(en.Detail)))
		if ids[i] != "" {
			e.c.callOf[ids[i]] = callRef{id: call, start: start, index: i}
		}
	}
	e.c.mu.Unlock()
	out, err := e.next.PutEvents(ctx, in, optFns...)
	now := time.Now()
	if err == nil && out != nil {
		e.c.mu.Lock()
		for i, r := range out.Entries {
			if i < len(ids) && ids[i] != "" && r.EventId != nil {
				if s := e.c.span(ids[i]); s.published.IsZero() {
					s.published = now
				}
			}
		}
		e.c.mu.Unlock()
	}
	return out, err
}

// cloudQueue delays each message to a consumer queue by the EventBridge and
// SQS hops (one draw per PutEvents call and target, so events published
// together arrive together, in order).
type cloudQueue struct {
	next     localrt.MessageSender
	c        *Cloud
	consumer string
}

func (q *cloudQueue) SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	var env struct {
		Detail json.RawMessage `json:"detail"`
	}
	_ = json.Unmarshal([]byte(aws.ToString(in.MessageBody)), &env)
	id := detailEventID(env.Detail)
	q.c.mu.Lock()
	ref, ok := q.c.callOf[id]
	if !ok {
		q.c.nextID++
		ref = callRef{id: q.c.nextID, start: time.Now()}
	}
	m := q.c.calls[ref.id]
	if m == nil {
		m = map[string]time.Duration{}
		q.c.calls[ref.id] = m
	}
	d, ok := m[q.consumer]
	if !ok {
		d = q.c.hops.EventBridge.sample(q.c.rng) + q.c.hops.SQS.sample(q.c.rng)
		m[q.consumer] = d
	}
	if id != "" {
		cs := q.c.span(id).consumer(q.consumer)
		if cs.targetHop == 0 {
			cs.targetHop = d
		}
	}
	q.c.mu.Unlock()
	// The hop runs from the start of the PutEvents call (the source's
	// producer stamps before publishing); entries of one call keep their
	// order (10 µs apart: the bus sends each from its own goroutine).
	wait := time.Until(ref.start.Add(d + time.Duration(ref.index)*10*time.Microsecond))
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return q.next.SendMessage(ctx, in, optFns...)
}
