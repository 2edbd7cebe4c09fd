package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// ErrNoNewImage is returned by Handle when an INSERT record carries no
// NewImage: the stream's view type is KEYS_ONLY or OLD_IMAGE. This is a
// configuration error; the whole batch is retried rather than acknowledged.
var ErrNoNewImage = errors.New("relay: INSERT stream record has no NewImage; the outbox table stream must use StreamViewType NEW_IMAGE or NEW_AND_OLD_IMAGES")

// ErrNoSequenceNumber is returned by Handle when a record that must be
// retried has no dynamodb.SequenceNumber: an empty itemIdentifier would fail
// the batch anyway, so the whole batch is failed explicitly.
var ErrNoSequenceNumber = errors.New("relay: stream record without SequenceNumber")

// Config configures a Relay. Zero values take the defaults of each part.
type Config struct {
	// Publisher configures the EventBridge publisher (EventBusName required).
	Publisher PublisherConfig
	// Marker configures marking and parking (Table and ParkedQueueURL required).
	Marker MarkerConfig
	// Logger receives structured logs. Default slog.Default(); it is also
	// the default logger of Publisher and Marker.
	Logger *slog.Logger
	// Region is this relay's Region in multi-Region mode
	// (config.RegionFromEnv; "" = single-Region mode): the relay publishes
	// only records whose outbox.AttrOriginRegion is Region, and
	// acknowledges every other record unpublished (docs/MULTI-REGION.md).
	Region string
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Publisher.Logger == nil {
		c.Publisher.Logger = c.Logger
	}
	if c.Marker.Logger == nil {
		c.Marker.Logger = c.Logger
	}
	c.Publisher.setDefaults()
	c.Marker.setDefaults()
}

// Validate reports a configuration error of either part, or a Region that
// is not shaped like an AWS Region name (config.ValidRegionName).
func (c Config) Validate() error {
	if c.Region != "" {
		if err := config.ValidRegionName(c.Region); err != nil {
			return fmt.Errorf("relay: Config.Region: %w", err)
		}
	}
	if err := c.Publisher.Validate(); err != nil {
		return err
	}
	return c.Marker.Validate()
}

// Relay is the DynamoDB Streams handler of the outbox table: it publishes
// each new outbox record to EventBridge, then marks it published (or parks
// it), and reports the first record not done as a partial batch failure. It
// is safe for concurrent use.
type Relay struct {
	pub    *Publisher
	marker *Marker
	log    *slog.Logger
	region string
	// foreign counts the records of another Region acknowledged unpublished.
	foreign atomic.Int64
}

// MetricForeignRecordsSkipped is the EMF metric (Count, namespace
// config.MetricNamespace, dimension config.MetricDimensionOutboxTable) of
// the stream records a multi-Region relay acknowledged without publishing
// because their outbox.AttrOriginRegion is not its Region (or is missing):
// one line per batch that had any. The event source mapping's filter
// (outbox.StreamFilterPatternIn) should keep it at zero; a steady non-zero
// value means the filter is missing or wrong.
const MetricForeignRecordsSkipped = "ForeignRecordsSkipped"

// New builds a Relay with its Publisher and Marker. It returns an error if
// cfg does not validate or a client is nil.
func New(eb EventBridgeAPI, ddb UpdateItemAPI, queue QueueSender, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pub, err := NewPublisher(eb, cfg.Publisher)
	if err != nil {
		return nil, err
	}
	marker, err := NewMarker(ddb, queue, cfg.Marker)
	if err != nil {
		return nil, err
	}
	return &Relay{pub: pub, marker: marker, log: cfg.Logger, region: cfg.Region}, nil
}

// Region returns Config.Region ("" in single-Region mode).
func (r *Relay) Region() string { return r.region }

// ForeignSkipped returns how many stream records of another Region this
// Relay acknowledged without publishing since it was built (the
// process-local counter behind MetricForeignRecordsSkipped).
func (r *Relay) ForeignSkipped() int64 { return r.foreign.Load() }

// foreignOrigin reports whether a multi-Region relay must leave the record
// alone: its NewImage's outbox.AttrOriginRegion is missing, not a string,
// or another Region. It also returns the origin found. Always false in
// single-Region mode.
func (r *Relay) foreignOrigin(img map[string]events.DynamoDBAttributeValue) (string, bool) {
	if r.region == "" {
		return "", false
	}
	v, ok := img[outbox.AttrOriginRegion]
	if !ok || v.DataType() != events.DataTypeString {
		return "", true
	}
	return v.String(), v.String() != r.region
}

// Publisher returns the relay's Publisher (shared with the reconciler).
func (r *Relay) Publisher() *Publisher { return r.pub }

// Marker returns the relay's Marker (shared with the reconciler).
func (r *Relay) Marker() *Marker { return r.marker }

// work is one stream record the relay acts on.
type work struct {
	rec  int // index in ev.Records
	mark Mark
	done bool // set when no further action is possible or needed
	err  error
}

// Handle processes one DynamoDB Streams batch as Lambda's event source
// mapping delivers it (configure FunctionResponseTypes
// ["ReportBatchItemFailures"]).
//
//   - Only INSERT records of outbox items are published. MODIFY records (the
//     relay's own marking), REMOVE records (TTL deletions included) and items
//     without an event_id in their NewImage (foreign items) are ignored.
//   - Multi-Region mode (Config.Region set): a record whose NewImage's
//     outbox.AttrOriginRegion is not Region, or that has none, was written
//     in another Region and replicated here ("Each global table produces an
//     independent stream based on all its writes", DynamoDB developer
//     guide): it is acknowledged without publishing (never a batch item
//     failure), counted (MetricForeignRecordsSkipped, ForeignSkipped) and
//     logged at debug. The event source mapping's filter
//     (outbox.StreamFilterPatternIn) is the first line; this is the second.
//   - An INSERT without NewImage returns ErrNoNewImage (wrapped) before
//     anything is published: the whole batch is retried, never acknowledged.
//   - A record whose NewImage does not decode as an outbox record (poison) is
//     parked, keyed by the record's Keys.
//   - Decodable records are published in order (Publisher.PublishInOrder):
//     an aggregate's event, ordered by key (sequence, index), is sent only
//     after its previous one in the batch was answered, in calls packed to
//     the floor (10 calls per 100 events unless one aggregate has more than
//     10 events in the batch). When an aggregate's event is not published
//     (a retryable failure), its later events in the batch are held back
//     (not sent, ErrorCode CodeHeldBack) while other aggregates flow, so an
//     aggregate's events never overtake each other on redelivery (I4).
//     Records that got an EventId are marked published, permanent failures
//     are parked.
//   - The response names the dynamodb.SequenceNumber (never eventID) of the
//     first record, in batch order, that is not done (retryable publish
//     failure, marking or parking failure, or no time left): one
//     batchItemFailures entry, or none on full success. Lambda then retries
//     from that record on.
//   - Deadline budget: when ctx has a deadline (the Lambda invocation
//     deadline), publishing stops MarkerConfig.Reserve before it and marking
//     stops AnswerMargin before it, so the answer arrives before Lambda's
//     timeout would throw it (and the batch's progress) away. Records not
//     done in time are reported as above. See MinFunctionTimeout.
//
// It returns ErrNoSequenceNumber (wrapped) when the record to report has no
// sequence number.
//
// Tracing (pkg/outboxtrace): one "outbox relay batch" span per invocation;
// the publish, mark and park spans of each record hang under the record's
// stored trace context and link to it (see Publisher.Publish, MarkAll).
func (r *Relay) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	ctx, span := outboxtrace.Tracer().Start(ctx, "outbox relay batch", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(outboxtrace.AttrBatchSize.Int(len(ev.Records))))
	defer span.End()
	for i, rec := range ev.Records {
		if rec.EventName == string(events.DynamoDBOperationTypeInsert) && len(rec.Change.NewImage) == 0 {
			return events.DynamoDBEventResponse{}, fmt.Errorf("%w (record %d, sequence number %s, stream view type %q)",
				ErrNoNewImage, i, rec.Change.SequenceNumber, rec.Change.StreamViewType)
		}
	}

	var items []*work
	var envs []outbox.Envelope
	var keys []outbox.Key
	var publishIdx []int // index into items of each envelope in envs
	foreignCount := 0
	defer func() {
		if foreignCount > 0 {
			r.foreign.Add(int64(foreignCount))
			r.marker.emf.Emit(map[string]Metric{MetricForeignRecordsSkipped: {Value: float64(foreignCount), Unit: UnitCount}})
		}
	}()
	for i, rec := range ev.Records {
		if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
			continue
		}
		if _, ok := rec.Change.NewImage[outbox.AttrEventID]; !ok {
			continue // foreign item
		}
		if origin, foreign := r.foreignOrigin(rec.Change.NewImage); foreign {
			foreignCount++
			r.log.DebugContext(ctx, "relay: record of another Region acknowledged without publishing",
				"origin_region", origin, "region", r.region, "sequence_number", rec.Change.SequenceNumber)
			continue
		}
		w := &work{rec: i}
		items = append(items, w)
		record, err := decodeRecord(rec)
		if err != nil {
			r.poison(ctx, w, rec, err)
			continue
		}
		w.mark = Mark{Key: record.Key, Envelope: record.Envelope}
		publishIdx = append(publishIdx, len(items)-1)
		envs = append(envs, record.Envelope)
		keys = append(keys, record.Key)
	}

	if len(envs) > 0 {
		// Publishing stops Reserve before the invocation deadline so that
		// marking and the answer fit (see WithReserve).
		pubCtx, cancel := WithReserve(ctx, r.marker.Reserve())
		results := r.pub.PublishInOrder(pubCtx, envs, keys)
		if pubCtx.Err() != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "relay: publishing stopped at the deadline reserve; unfinished records are reported for retry",
				"reserve", r.marker.Reserve())
		}
		cancel()
		for j, res := range results {
			w := items[publishIdx[j]]
			w.mark.Result = res
			if res.Status == RetryableFailure {
				e := w.mark.Envelope
				r.log.WarnContext(ctx, "relay: publish failed, will retry",
					"event_id", e.EventID, "aggregate_id", e.AggregateID, "sequence", e.Sequence,
					"error_code", res.ErrorCode, "error", res.ErrorMessage, "attempts", res.Attempts)
			}
		}
	}

	var marks []Mark
	var markIdx []int
	for i, w := range items {
		if w.done || w.err != nil {
			continue
		}
		marks = append(marks, w.mark)
		markIdx = append(markIdx, i)
	}
	markCtx, cancel := WithReserve(ctx, AnswerMargin)
	errs := r.marker.MarkAll(markCtx, marks)
	cancel()
	for j, err := range errs {
		w := items[markIdx[j]]
		switch {
		case err != nil:
			w.err = err
			e := w.mark.Envelope
			r.log.ErrorContext(ctx, "relay: marking failed, will retry",
				"event_id", e.EventID, "aggregate_id", e.AggregateID, "sequence", e.Sequence, "error", err)
		case w.mark.Result.Status != RetryableFailure:
			w.done = true
		}
	}

	for _, w := range items {
		if w.done {
			continue
		}
		seq := ev.Records[w.rec].Change.SequenceNumber
		if seq == "" {
			return events.DynamoDBEventResponse{}, fmt.Errorf("%w (record %d, eventID %s)", ErrNoSequenceNumber, w.rec, ev.Records[w.rec].EventID)
		}
		return events.DynamoDBEventResponse{
			BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: seq}},
		}, nil
	}
	return events.DynamoDBEventResponse{}, nil
}

// poison prepares an undecodable record for parking, keyed by its Keys.
func (r *Relay) poison(ctx context.Context, w *work, rec events.DynamoDBEventRecord, cause error) {
	image, _ := json.Marshal(rec.Change.NewImage) // DynamoDB JSON, lossless
	key, err := keyFromImage(rec.Change.Keys)
	if err != nil {
		w.err = fmt.Errorf("poison record without a usable key: %w (decode error: %v)", err, cause)
		r.log.ErrorContext(ctx, "relay: poison record cannot be parked", "sequence_number", rec.Change.SequenceNumber, "error", w.err)
		return
	}
	r.log.ErrorContext(ctx, "relay: poison outbox record, parking", "pk", key.PK, "sk", key.SK, "error", cause)
	w.mark = Mark{
		Key:    key,
		Image:  image,
		Result: Result{Status: PermanentFailure, ErrorCode: CodePoisonRecord, ErrorMessage: cause.Error()},
	}
}

// decodeRecord decodes a stream record's NewImage as an outbox record.
func decodeRecord(rec events.DynamoDBEventRecord) (outbox.Record, error) {
	item, err := streamimage.ToAttributeValueMap(rec.Change.NewImage)
	if err != nil {
		return outbox.Record{}, err
	}
	return outbox.RecordFromItem(item)
}

// keyFromImage reads the outbox key (pk, sk strings) from a stream Keys map.
func keyFromImage(keys map[string]events.DynamoDBAttributeValue) (outbox.Key, error) {
	item, err := streamimage.ToAttributeValueMap(keys)
	if err != nil {
		return outbox.Key{}, err
	}
	pk, ok1 := item[outbox.AttrPK].(*ddbtypes.AttributeValueMemberS)
	sk, ok2 := item[outbox.AttrSK].(*ddbtypes.AttributeValueMemberS)
	if !ok1 || !ok2 {
		return outbox.Key{}, fmt.Errorf("keys lack string %s and %s", outbox.AttrPK, outbox.AttrSK)
	}
	return outbox.Key{PK: pk.Value, SK: sk.Value}, nil
}
