package devstack

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// The event-path recorder: the console's record of each event's hops. It
// reuses the spans the relay, the reconciler and the consumers already
// start (pkg/relay/trace.go, pkg/sqsconsumer/trace.go, pkg/dedup): an
// OpenTelemetry span processor that keeps, per outbox event_id, one step
// per finished span of interest, in memory, for the stack's lifetime
// (bounded: maxPathEvents events, the oldest dropped first). Nothing is
// exported; with -trace the same spans also go to Jaeger.

// Step kinds of an event's path.
const (
	StepRelay    = "relay"    // the relay's publish of the event (PutEvents entry: Start to the bus's answer at End)
	StepParked   = "parked"   // the relay parked the record (permanent refusal)
	StepResend   = "resend"   // the reconciler re-sent the record
	StepConsumer = "consumer" // one delivery to one consumer, with its outcome
)

// PathStep is one hop of an event's path as the console shows it.
type PathStep struct {
	Kind     string
	Consumer string // StepConsumer only
	// Outcome: for StepConsumer an outboxtrace.Outcome* value (applied,
	// duplicate, held, dead_lettered, retry, ignored); for StepRelay and
	// StepResend the publish status (published, retryable_failure,
	// permanent_failure).
	Outcome string
	Reason  string // error code or dead-letter reason, when any
	Start   time.Time
	End     time.Time
}

// maxPathEvents bounds the recorder's memory (a long make demo run).
const maxPathEvents = 20000

// pathRecorder is a sdktrace.SpanProcessor keeping PathSteps by event id.
type pathRecorder struct {
	mu    sync.Mutex
	paths map[string][]PathStep
	order []string // event ids, oldest first
}

func newPathRecorder() *pathRecorder {
	return &pathRecorder{paths: map[string][]PathStep{}}
}

// Path returns a copy of eventID's steps in the order their spans ended.
func (r *pathRecorder) Path(eventID string) []PathStep {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]PathStep(nil), r.paths[eventID]...)
}

func (r *pathRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *pathRecorder) Shutdown(context.Context) error                  { return nil }
func (r *pathRecorder) ForceFlush(context.Context) error                { return nil }

// OnEnd records the span as a step when it is one of the path's.
func (r *pathRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	id := attrs[outboxtrace.AttrEventID].AsString()
	if id == "" {
		return
	}
	st := PathStep{Start: s.StartTime(), End: s.EndTime()}
	name := s.Name()
	switch {
	case strings.HasPrefix(name, "outbox publish "):
		st.Kind, st.Outcome, st.Reason = StepRelay, attrs[outboxtrace.AttrPublishStatus].AsString(), attrs[outboxtrace.AttrErrorCode].AsString()
	case strings.HasPrefix(name, "outbox resend "):
		st.Kind, st.Outcome, st.Reason = StepResend, attrs[outboxtrace.AttrPublishStatus].AsString(), attrs[outboxtrace.AttrErrorCode].AsString()
	case name == "outbox park":
		st.Kind, st.Outcome, st.Reason = StepParked, attrs[outboxtrace.AttrMarkOutcome].AsString(), attrs[outboxtrace.AttrErrorCode].AsString()
	case strings.HasPrefix(name, "consume "):
		st.Kind, st.Consumer = StepConsumer, attrs[outboxtrace.AttrConsumer].AsString()
		st.Outcome, st.Reason = attrs[outboxtrace.AttrOutcome].AsString(), attrs[outboxtrace.AttrReason].AsString()
		if st.Outcome == "" {
			st.Outcome = outboxtrace.OutcomeApplied // the handler returned nil without naming it (a consumer outside pkg/dedup)
		}
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.paths[id]; !ok {
		r.order = append(r.order, id)
		if len(r.order) > maxPathEvents {
			delete(r.paths, r.order[0])
			r.order = r.order[1:]
		}
	}
	r.paths[id] = append(r.paths[id], st)
}

// installPathRecorder registers rec with the process's tracer provider:
// the SDK provider -trace installed (otelsetup.Setup), or else a provider
// of its own that records and exports nothing else, installed globally with
// outboxtrace.SetEnabled(true) so that the consumers start their spans. The
// returned function undoes it (the previous provider and flag restored).
func installPathRecorder(rec *pathRecorder) (undo func()) {
	if tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		tp.RegisterSpanProcessor(rec)
		was := outboxtrace.SetEnabled(true)
		return func() { tp.UnregisterSpanProcessor(rec); outboxtrace.SetEnabled(was) }
	}
	prev := otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	was := outboxtrace.SetEnabled(true)
	return func() {
		otel.SetTracerProvider(prev)
		outboxtrace.SetEnabled(was)
		_ = tp.Shutdown(context.Background())
	}
}
