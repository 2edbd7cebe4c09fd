package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// ParkedMessage is the body of a parked-records DLQ message (JSON). The body
// is always legal for SQS: characters SQS refuses are written as JSON
// \uXXXX escapes (decoding gives the stored value back; invalid UTF-8 bytes
// become U+FFFD), and it fits the queue's MaximumMessageSize
// (MarkerConfig.MaxMessageBytes) with its message attributes, error_code and
// event_id. When the whole record does not fit, Truncated is set and the
// message keeps the key, the error code, the reason and what fits; the
// record in the table keeps everything.
type ParkedMessage struct {
	Table     string    `json:"table"`
	PK        string    `json:"pk"`
	SK        string    `json:"sk"`
	ErrorCode string    `json:"error_code"`
	Reason    string    `json:"reason"`
	ParkedAt  time.Time `json:"parked_at"`
	EventID   string    `json:"event_id,omitempty"`
	// Envelope is the full envelope; nil for a poison record.
	Envelope *outbox.Envelope `json:"envelope,omitempty"`
	// Image is the raw item image (DynamoDB JSON) of a poison record.
	Image json.RawMessage `json:"image,omitempty"`
	// Truncated is true when the payload or image was left out to fit the
	// SQS message size limit; the full record stays in the table.
	Truncated bool `json:"truncated,omitempty"`
}

// Park sends the record to the parked-records DLQ first (full envelope and
// reason, escaped and bounded so that SQS accepts it whatever text the
// record holds; see ParkedMessage), then marks it: UpdateItem with condition
// attribute_exists(pk), SET status = PARKED, parked_reason, parked_at,
// REMOVE pending_shard and expires_at (a parked record never expires). It
// increments the Parked counter, emits an EMF ParkedRecords metric and logs
// with event_id, aggregate_id and sequence. If SendMessage fails the record is
// left untouched (still pending) and the error is returned; so is a done
// ctx, before anything is sent. If ctx ends between the SendMessage and the
// UpdateItem, the error is returned and the record stays pending: a later
// park sends a second DLQ message. A record that no
// longer exists counts as parked (nil).
func (m *Marker) Park(ctx context.Context, mk Mark) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("park %s/%s: no time left: %w", mk.Key.PK, mk.Key.SK, err)
	}
	now := m.cfg.Now().UTC()
	reason := mk.Result.ErrorCode
	if mk.Result.ErrorMessage != "" {
		reason += ": " + mk.Result.ErrorMessage
	}
	attrs := parkedAttributes(mk)
	body, err := m.parkedBody(mk, now, m.cfg.MaxMessageBytes-messageAttributeBytes(attrs))
	if err != nil {
		return err
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(m.cfg.ParkedQueueURL),
		MessageBody:       aws.String(body),
		MessageAttributes: attrs,
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	_, err = m.queue.SendMessage(callCtx, in)
	cancel()
	if err != nil {
		return fmt.Errorf("park %s/%s: send to DLQ: %w", mk.Key.PK, mk.Key.SK, err)
	}
	upd := expression.
		Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusParked)).
		Set(expression.Name(outbox.AttrParkedReason), expression.Value(nonEmpty(reason))).
		Set(expression.Name(outbox.AttrParkedAt), expression.Value(now.Format(time.RFC3339Nano))).
		Remove(expression.Name(outbox.AttrPendingShard)).
		Remove(expression.Name(outbox.AttrExpiresAt))
	// A record another delivery already published (an at-least-once
	// re-send that failed where the first send succeeded) stays PUBLISHED:
	// its event reached the bus. A record already PARKED (the reconciler read
	// it from the eventually consistent index just before) is not parked and
	// counted twice. In both cases the DLQ message sent above is a duplicate
	// that needs no redrive (Redrive refuses a record that is not PARKED).
	status := expression.Name(outbox.AttrStatus)
	notDone := status.NotEqual(expression.Value(outbox.StatusPublished)).
		And(status.NotEqual(expression.Value(outbox.StatusParked)))
	if err := m.update(ctx, mk.Key, upd, notDone); err != nil {
		if !isConditionFailed(err) {
			return fmt.Errorf("park %s/%s: mark parked: %w", mk.Key.PK, mk.Key.SK, err)
		}
		m.log(ctx, slog.LevelWarn, "relay: record to park was already published, parked or is gone; left as is", mk.Envelope, mk.Key, "error_code", mk.Result.ErrorCode)
		return nil
	}
	m.parked.Add(1)
	m.emf.Emit(map[string]Metric{config.MetricParked: {Value: 1, Unit: UnitCount}})
	m.log(ctx, slog.LevelError, "relay: outbox record parked", mk.Envelope, mk.Key, "error_code", mk.Result.ErrorCode, "reason", reason)
	return nil
}

// Bounds applied to free text when a parked message must shrink to fit, in
// bytes before JSON escaping.
const (
	parkedReasonBytes = 1024 // Reason once the payload is dropped
	parkedShortBytes  = 256  // Reason once the envelope is dropped
	parkedKeyBytes    = 64   // Table, PK, SK and EventID as a last resort
	parkedAttrBytes   = 128  // each message attribute value
)

// parkedBody renders the DLQ message body so that SQS accepts it whatever
// text the record holds, within maxBytes (the queue's MaximumMessageSize
// less the message attributes):
//
//   - Legal characters: the JSON is passed through sqsmsg.EscapeJSON, so a
//     character SQS refuses (U+FFFE, U+FFFF, controls, invalid UTF-8) is
//     written as a \uXXXX escape with the same decoded value; JSON escapes
//     already in the stored text (a lone "\ud800" included) are ASCII and
//     kept as they are.
//   - Size: when the full message does not fit it is shrunk in steps, each
//     setting Truncated: (1) drop the payload or image and cut Reason to
//     1 KiB; (2) drop the envelope (EventID stays) and cut Reason to 256
//     bytes; (3) cut Table, PK, SK and EventID to 64 bytes each. The record
//     itself keeps everything in the table (PARKED).
//
// It returns an error only when even step 3 does not fit (maxBytes far below
// any real queue's 1,024-byte minimum).
func (m *Marker) parkedBody(mk Mark, now time.Time, maxBytes int) (string, error) {
	msg := ParkedMessage{
		Table:     m.cfg.Table,
		PK:        mk.Key.PK,
		SK:        mk.Key.SK,
		ErrorCode: mk.Result.ErrorCode,
		Reason:    mk.Result.ErrorMessage,
		ParkedAt:  now,
		EventID:   mk.Envelope.EventID,
		Image:     mk.Image,
	}
	if mk.Envelope.EventID != "" {
		env := mk.Envelope
		msg.Envelope = &env
	}
	shrink := []func(*ParkedMessage){
		func(*ParkedMessage) {},
		func(p *ParkedMessage) {
			if p.Envelope != nil {
				env := *p.Envelope
				env.Payload = nil
				p.Envelope = &env
			}
			p.Image = nil
			p.Reason = cutUTF8(p.Reason, parkedReasonBytes)
		},
		func(p *ParkedMessage) {
			p.Envelope = nil
			p.Reason = cutUTF8(p.Reason, parkedShortBytes)
		},
		func(p *ParkedMessage) {
			p.Table = cutUTF8(p.Table, parkedKeyBytes)
			p.PK = cutUTF8(p.PK, parkedKeyBytes)
			p.SK = cutUTF8(p.SK, parkedKeyBytes)
			p.EventID = cutUTF8(p.EventID, parkedKeyBytes)
		},
	}
	var last error
	for step, fn := range shrink {
		fn(&msg)
		msg.Truncated = msg.Truncated || step > 0
		b, err := json.Marshal(msg)
		if err != nil && (msg.Envelope != nil && msg.Envelope.Payload != nil || msg.Image != nil) {
			// A payload or image that is not valid JSON cannot be embedded raw.
			if msg.Envelope != nil {
				env := *msg.Envelope
				env.Payload = nil
				msg.Envelope = &env
			}
			msg.Image, msg.Truncated = nil, true
			b, err = json.Marshal(msg)
		}
		if err != nil {
			return "", fmt.Errorf("park %s/%s: encode DLQ message: %w", mk.Key.PK, mk.Key.SK, err)
		}
		body := sqsmsg.EscapeJSON(string(b))
		if last = sqsmsg.Check(body, maxBytes); last == nil {
			return body, nil
		}
		if !errors.Is(last, sqsmsg.ErrTooLarge) {
			return "", fmt.Errorf("park %s/%s: DLQ message: %w", mk.Key.PK, mk.Key.SK, last)
		}
	}
	return "", fmt.Errorf("park %s/%s: DLQ message does not fit even without payload and envelope: %w", mk.Key.PK, mk.Key.SK, last)
}

// parkedAttributes returns the parked message's attributes (error_code,
// and event_id when known), their values made legal for SQS and bounded.
func parkedAttributes(mk Mark) map[string]sqstypes.MessageAttributeValue {
	str := func(v string) sqstypes.MessageAttributeValue {
		v = sqsmsg.Sanitize(v, parkedAttrBytes)
		if v == "" {
			v = "unknown"
		}
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrs := map[string]sqstypes.MessageAttributeValue{"error_code": str(mk.Result.ErrorCode)}
	if mk.Envelope.EventID != "" {
		attrs["event_id"] = str(mk.Envelope.EventID)
	}
	return attrs
}

// messageAttributeBytes is the size message attributes add to an SQS
// message: name + data type + value bytes of each (Amazon SQS API
// Reference, MessageAttributeValue).
func messageAttributeBytes(attrs map[string]sqstypes.MessageAttributeValue) int {
	n := 0
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// cutUTF8 returns s cut to at most n bytes on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
