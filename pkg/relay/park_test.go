package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// strictMarker returns a Marker parking to a MemoryQueue, which refuses what
// SQS refuses (character set, MaximumMessageSize with attributes).
func strictMarker(t *testing.T, maxBytes int) (*relay.Marker, *localrt.MemoryQueue, *fakeDDB) {
	t.Helper()
	q := localrt.NewMemoryQueue("https://sqs.local/parked")
	if err := q.SetMaxMessageBytes(maxBytes); err != nil {
		t.Fatal(err)
	}
	ddb := &fakeDDB{}
	cfg := testConfig().Marker
	cfg.ParkedQueueURL = q.URL()
	cfg.MaxMessageBytes = maxBytes
	cfg.Logger = quietLogger()
	cfg.Now = func() time.Time { return parkedAt }
	m, err := relay.NewMarker(ddb, q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, q, ddb
}

// parkedAt is the strict marker's clock.
var parkedAt = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// bodyJustUnder returns a mark whose full parked message body (as Park
// renders it before adding message attributes) is 20 bytes under limit, so
// it fits only if the attributes are not counted.
func bodyJustUnder(t *testing.T, limit int) relay.Mark {
	t.Helper()
	size := func(mk relay.Mark) int {
		env := mk.Envelope
		b, err := json.Marshal(relay.ParkedMessage{Table: "outbox", PK: mk.Key.PK, SK: mk.Key.SK, ErrorCode: mk.Result.ErrorCode,
			Reason: mk.Result.ErrorMessage, ParkedAt: parkedAt, EventID: env.EventID, Envelope: &env})
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	mk := permanent(envelope(t, "edge", 1, 1000), "", "NotAuthorizedForSourceException", "not authorized")
	pad := 1000 + limit - 20 - size(mk)
	mk.Envelope = withPayload(mk.Envelope, `{"pad":"`+strings.Repeat("x", pad)+`"}`)
	if got := size(mk); got != limit-20 {
		t.Fatalf("body is %d bytes, want %d", got, limit-20)
	}
	return mk
}

// withPayload returns env with its payload replaced by raw JSON text, as a
// record could hold it.
func withPayload(env outbox.Envelope, raw string) outbox.Envelope {
	env.Payload = json.RawMessage(raw)
	return env
}

// maxEntryEnvelope returns an envelope whose EventBridge entry (source
// "test.source", measured like AWS) is just under the 256 KB entry limit.
func maxEntryEnvelope(t *testing.T) outbox.Envelope {
	t.Helper()
	env := envelope(t, "max", 1, 0)
	overhead := outbox.EntrySize("test.source", env.EventType, mustDetail(t, env))
	return envelope(t, "max", 1, config.DefaultMaxEntryBytes-overhead-10)
}

func mustDetail(t *testing.T, env outbox.Envelope) []byte {
	t.Helper()
	d, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// jsonEqual reports whether two JSON texts decode to the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("decode %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// TestParkBodyIsLegalForSQS parks records whose stored text SQS would refuse
// verbatim, or whose full envelope does not fit the queue, through a strict
// MemoryQueue: every park must succeed (message accepted, record PARKED),
// keep the decoded value of what it carries, and say when it left
// something out.
func TestParkBodyIsLegalForSQS(t *testing.T) {
	t.Parallel()
	maxEnv := maxEntryEnvelope(t)
	if size := outbox.EntrySize("test.source", maxEnv.EventType, mustDetail(t, maxEnv)); size >= config.DefaultMaxEntryBytes || size < config.DefaultMaxEntryBytes-100 {
		t.Fatalf("max entry is %d bytes, want just under %d", size, config.DefaultMaxEntryBytes)
	}
	cases := []struct {
		name          string
		mark          func(t *testing.T) relay.Mark
		maxBytes      int
		wantTruncated bool
		wantPayload   bool // the envelope's payload is in the message, same value
	}{
		{"U+FFFE in payload", func(t *testing.T) relay.Mark {
			return permanent(envelope(t, "fffe", 1, 0), `{"s":"a`+"\uFFFE"+`b"}`, "MalformedDetail", "bad detail")
		}, sqsmsg.DefaultMaxBytes, false, true},
		{"U+FFFF in payload", func(t *testing.T) relay.Mark {
			return permanent(envelope(t, "ffff", 1, 0), `{"s":"`+"\uFFFF\uFFFF"+`"}`, "MalformedDetail", "bad detail")
		}, sqsmsg.DefaultMaxBytes, false, true},
		{"lone surrogate escape in payload", func(t *testing.T) relay.Mark {
			return permanent(envelope(t, "surrogate", 1, 0), `{"s":"\ud800x"}`, "MalformedDetail", "bad detail")
		}, sqsmsg.DefaultMaxBytes, false, true},
		{"control characters and invalid UTF-8 in the reason", func(t *testing.T) relay.Mark {
			mk := permanent(envelope(t, "reason", 1, 10), "", "InvalidArgument", "bad \x00 \x1f \xff \uFFFF reason")
			return mk
		}, sqsmsg.DefaultMaxBytes, false, true},
		{"U+FFFF in event id and aggregate id", func(t *testing.T) relay.Mark {
			env := envelope(t, "id\uFFFF", 1, 10)
			env.EventID = "evt-\uFFFF"
			mk := permanent(env, "", relay.CodeInvalidEnvelope, "event_id is not a UUID")
			return mk
		}, sqsmsg.DefaultMaxBytes, false, true},
		{"poison image with U+FFFF", func(t *testing.T) relay.Mark {
			return relay.Mark{
				Key:    outbox.Key{PK: "Order#p\uFFFF", SK: "EVT#1"},
				Image:  json.RawMessage(`{"pk":{"S":"Order#p` + "\uFFFF" + `"},"payload":{"S":"\ud800"}}`),
				Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: relay.CodePoisonRecord, ErrorMessage: "decode \uFFFE"},
			}
		}, sqsmsg.DefaultMaxBytes, false, false},
		{"maximum-size envelope", func(t *testing.T) relay.Mark {
			return permanent(maxEnv, "", "NotAuthorizedForSourceException", "not authorized")
		}, sqsmsg.DefaultMaxBytes, true, false},
		{"body fits but not with its attributes", func(t *testing.T) relay.Mark {
			return bodyJustUnder(t, sqsmsg.DefaultMaxBytes)
		}, sqsmsg.DefaultMaxBytes, true, false},
		{"escaping makes it too large", func(t *testing.T) relay.Mark {
			// 80,000 U+FFFF are 240,000 bytes stored, 480,000 escaped.
			return permanent(envelope(t, "grow", 1, 0), `{"s":"`+strings.Repeat("\uFFFF", 80000)+`"}`, "MalformedDetail", "bad detail")
		}, sqsmsg.DefaultMaxBytes, true, false},
		{"smallest queue, long key and reason", func(t *testing.T) relay.Mark {
			env := envelope(t, strings.Repeat("k\uFFFF", 300), 1, 2000)
			mk := permanent(env, "", "InvalidArgument", strings.Repeat("r\uFFFF", 2000))
			mk.Key.SK = strings.Repeat("s", 1000)
			return mk
		}, sqsmsg.MinMaxBytes, true, false},
		{"larger queue keeps the maximum-size envelope", func(t *testing.T) relay.Mark {
			return permanent(maxEnv, "", "NotAuthorizedForSourceException", "not authorized")
		}, sqsmsg.MaxMaxBytes, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, q, ddb := strictMarker(t, c.maxBytes)
			mk := c.mark(t)
			if err := m.Park(context.Background(), mk); err != nil {
				t.Fatalf("Park: %v", err)
			}
			msgs := q.Messages()
			if len(msgs) != 1 {
				t.Fatalf("queue holds %d messages, want 1", len(msgs))
			}
			body := msgs[0].Body
			if err := sqsmsg.Check(body, c.maxBytes); err != nil {
				t.Fatalf("body refused by SQS rules: %v", err)
			}
			var got relay.ParkedMessage
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if got.Truncated != c.wantTruncated {
				t.Errorf("truncated = %v, want %v", got.Truncated, c.wantTruncated)
			}
			if got.ErrorCode != mk.Result.ErrorCode || got.Reason == "" {
				t.Errorf("error code %q reason %q", got.ErrorCode, got.Reason)
			}
			if !c.wantTruncated && (got.PK != mk.Key.PK || got.SK != mk.Key.SK || got.Reason != strings.ToValidUTF8(mk.Result.ErrorMessage, "\uFFFD")) {
				t.Errorf("key/reason changed: %q %q %q", got.PK, got.SK, got.Reason)
			}
			if c.wantTruncated && (got.PK == "" || !strings.HasPrefix(mk.Key.PK, got.PK) || !strings.HasPrefix(mk.Key.SK, got.SK)) {
				t.Errorf("truncated message lost the key: %q %q", got.PK, got.SK)
			}
			if c.wantPayload {
				if got.Envelope == nil || got.Envelope.EventID != mk.Envelope.EventID || !jsonEqual(t, got.Envelope.Payload, mk.Envelope.Payload) {
					t.Errorf("envelope = %+v, want payload %s", got.Envelope, mk.Envelope.Payload)
				}
				if !bytes.ContainsRune(mk.Envelope.Payload, '\uFFFF') && !bytes.ContainsRune(mk.Envelope.Payload, '\uFFFE') &&
					!bytes.Equal(got.Envelope.Payload, mk.Envelope.Payload) {
					t.Errorf("legal payload not kept byte for byte: %s", got.Envelope.Payload)
				}
			}
			if mk.Image != nil && !c.wantTruncated && !jsonEqual(t, got.Image, mk.Image) {
				t.Errorf("image = %s, want %s", got.Image, mk.Image)
			}
			if u := ddb.byPK()[mk.Key.PK]; !strings.Contains(u, "status = PARKED") {
				t.Errorf("record not marked PARKED: %q", u)
			}
			if m.Parked() != 1 {
				t.Errorf("Parked() = %d", m.Parked())
			}
		})
	}
}

// permanent returns the mark of a permanently failed envelope; payload, when
// not empty, replaces the envelope's payload text.
func permanent(env outbox.Envelope, payload, code, msg string) relay.Mark {
	if payload != "" {
		env = withPayload(env, payload)
	}
	return relay.Mark{
		Key:      outbox.KeyFor(env.AggregateType, env.AggregateID, env.Sequence, 0),
		Envelope: env,
		Result:   relay.Result{Status: relay.PermanentFailure, ErrorCode: code, ErrorMessage: msg},
	}
}

// TestHandleParksIllegalTextThroughStrictQueue: the stream path end to end
// with a strict queue: a record whose payload holds U+FFFF and that
// EventBridge rejects for good is parked, not retried forever.
func TestHandleParksIllegalTextThroughStrictQueue(t *testing.T) {
	t.Parallel()
	bad := withPayload(envelope(t, "bad", 1, 0), `{"s":"`+"\uFFFF"+`","t":"\ud800"}`)
	good := envelope(t, "good", 1, 10)
	eb := &fakeEventBridge{fail: func(id string, _ int) string {
		if id == bad.EventID {
			return "MalformedDetail"
		}
		return ""
	}}
	q := localrt.NewMemoryQueue("https://sqs.local/parked")
	ddb := &fakeDDB{}
	r, err := relay.New(eb, ddb, q, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
		insertRecord(t, bad, "600000000000000000001"),
		insertRecord(t, good, "600000000000000000002"),
	}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v, err %v: the record was not parked", resp, err)
	}
	if q.Len() != 1 {
		t.Fatalf("parked queue holds %d messages, want 1", q.Len())
	}
	ups := ddb.byPK()
	if !strings.Contains(ups["Order#bad"], "status = PARKED") || !strings.Contains(ups["Order#good"], "status = PUBLISHED") {
		t.Errorf("updates = %v", ups)
	}
}

// A stored record whose detail holds characters SQS refuses (written before
// the outbox writer refused them, or by another writer) is parked with
// CodeUndeliverableText and never sent: EventBridge would accept it, and
// then no SQS-backed consumer queue (nor the rule DLQ) could take it.
func TestHandleParksUndeliverableTextWithoutSendingIt(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"\uFFFF", "\uFFFE", "a\uFFFFb", `\ud800`, `x\udfffy`} {
		bad := withPayload(envelope(t, "bad", 1, 0), `{"reason":"`+text+`"}`)
		good := envelope(t, "good", 1, 10)
		eb := &fakeEventBridge{}
		q := localrt.NewMemoryQueue("https://sqs.local/parked")
		ddb := &fakeDDB{}
		r, err := relay.New(eb, ddb, q, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := r.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
			insertRecord(t, bad, "600000000000000000001"),
			insertRecord(t, good, "600000000000000000002"),
		}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%q: resp %+v, err %v", text, resp, err)
		}
		for _, call := range eb.calls {
			for _, e := range call {
				if strings.Contains(aws.ToString(e.Detail), bad.EventID) {
					t.Fatalf("%q: the undeliverable event was sent to EventBridge", text)
				}
			}
		}
		msgs := q.Messages()
		if len(msgs) != 1 || !strings.Contains(msgs[0].Body, relay.CodeUndeliverableText) {
			t.Fatalf("%q: parked messages %+v, want one naming %s", text, msgs, relay.CodeUndeliverableText)
		}
		if ups := ddb.byPK(); !strings.Contains(ups["Order#bad"], "status = PARKED") || !strings.Contains(ups["Order#good"], "status = PUBLISHED") {
			t.Errorf("%q: updates = %v", text, ups)
		}
	}
}
