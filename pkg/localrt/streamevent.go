package localrt

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// DefaultEventVersion is the eventVersion written when a Streams record
// carries none. DynamoDB Streams currently sends "1.1"; the poller passes
// through whatever the stream returns (consumers must not pin it).
const DefaultEventVersion = "1.1"

// lambdaStreamEvent is the JSON payload Lambda sends for a DynamoDB Streams
// batch: {"Records":[...]}.
type lambdaStreamEvent struct {
	Records []json.RawMessage `json:"Records"`
}

// lambdaRecord is one record as Lambda delivers it (camelCase metadata,
// PascalCase "dynamodb" object, eventSourceARN added by Lambda).
type lambdaRecord struct {
	EventID        string             `json:"eventID"`
	EventName      string             `json:"eventName"`
	EventVersion   string             `json:"eventVersion"`
	EventSource    string             `json:"eventSource"`
	AWSRegion      string             `json:"awsRegion"`
	Dynamodb       lambdaStreamRecord `json:"dynamodb"`
	UserIdentity   *lambdaIdentity    `json:"userIdentity,omitempty"`
	EventSourceARN string             `json:"eventSourceARN"`
}

type lambdaStreamRecord struct {
	// ApproximateCreationDateTime is Unix epoch seconds as a JSON number.
	ApproximateCreationDateTime json.Number                `json:"ApproximateCreationDateTime,omitempty"`
	Keys                        map[string]json.RawMessage `json:"Keys,omitempty"`
	NewImage                    map[string]json.RawMessage `json:"NewImage,omitempty"`
	OldImage                    map[string]json.RawMessage `json:"OldImage,omitempty"`
	SequenceNumber              string                     `json:"SequenceNumber"`
	SizeBytes                   int64                      `json:"SizeBytes"`
	StreamViewType              string                     `json:"StreamViewType"`
}

type lambdaIdentity struct {
	Type        string `json:"type"`
	PrincipalID string `json:"principalId"`
}

// StreamRecordJSON returns one Streams API record in the JSON shape Lambda
// delivers inside a DynamoDB Streams event
// (https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html):
//
//	{"eventID":"…","eventName":"INSERT|MODIFY|REMOVE","eventVersion":"1.1",
//	 "eventSource":"aws:dynamodb","awsRegion":"…",
//	 "dynamodb":{"ApproximateCreationDateTime":1693997155,"Keys":{…},
//	   "NewImage":{…},"OldImage":{…},"SequenceNumber":"…","SizeBytes":123,
//	   "StreamViewType":"NEW_IMAGE"},
//	 "userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},
//	 "eventSourceARN":"arn:aws:dynamodb:…:table/T/stream/…"}
//
// ApproximateCreationDateTime is epoch seconds as a JSON number with a
// fraction, as Lambda sends it ("1693997155.0", or "1693997155.123" when the
// stream gives milliseconds; AWS-recorded events carry the fraction, and
// handlers must accept both forms); images are DynamoDB JSON ({"S":"x"}, {"N":"101"} with the number
// kept as its exact string, B and BS as standard base64, SS, NS, M, L,
// {"NULL":true}, {"BOOL":b}); SizeBytes is computed as AWS computes it
// (StreamRecordSizeBytes), whatever the server answered; userIdentity is
// present only when the record has one. awsRegion falls back to region when
// the record has none.
func StreamRecordJSON(rec streamtypes.Record, streamARN, region string) ([]byte, error) {
	lr := lambdaRecord{
		EventID:        aws.ToString(rec.EventID),
		EventName:      string(rec.EventName),
		EventVersion:   aws.ToString(rec.EventVersion),
		EventSource:    aws.ToString(rec.EventSource),
		AWSRegion:      aws.ToString(rec.AwsRegion),
		EventSourceARN: streamARN,
	}
	if lr.EventVersion == "" {
		lr.EventVersion = DefaultEventVersion
	}
	if lr.EventSource == "" {
		lr.EventSource = "aws:dynamodb"
	}
	if lr.AWSRegion == "" {
		lr.AWSRegion = region
	}
	if id := rec.UserIdentity; id != nil {
		lr.UserIdentity = &lambdaIdentity{Type: aws.ToString(id.Type), PrincipalID: aws.ToString(id.PrincipalId)}
	}
	if d := rec.Dynamodb; d != nil {
		sr := &lr.Dynamodb
		if t := d.ApproximateCreationDateTime; t != nil {
			sr.ApproximateCreationDateTime = json.Number(EpochSecondsJSON(*t))
		}
		var err error
		if sr.Keys, err = attributeMapJSON(d.Keys); err != nil {
			return nil, fmt.Errorf("Keys: %w", err) //nolint:staticcheck // ST1005: the stream record field's name
		}
		if sr.NewImage, err = attributeMapJSON(d.NewImage); err != nil {
			return nil, fmt.Errorf("NewImage: %w", err)
		}
		if sr.OldImage, err = attributeMapJSON(d.OldImage); err != nil {
			return nil, fmt.Errorf("OldImage: %w", err)
		}
		sr.SequenceNumber = aws.ToString(d.SequenceNumber)
		// AWS's figure, not the server's: Dynoxide's was 1.6–2.3 times larger.
		sr.SizeBytes = StreamRecordSizeBytes(d)
		sr.StreamViewType = string(d.StreamViewType)
	}
	return json.Marshal(lr)
}

// EpochSecondsJSON formats t as epoch seconds with a fraction of at least one
// digit and at most three (milliseconds): "1693997155.0", "1693997155.123".
func EpochSecondsJSON(t time.Time) string {
	ms := t.UnixMilli()
	sec, frac := ms/1000, ms%1000
	if frac < 0 {
		sec, frac = sec-1, frac+1000
	}
	if frac == 0 {
		return strconv.FormatInt(sec, 10) + ".0"
	}
	return strings.TrimRight(fmt.Sprintf("%d.%03d", sec, frac), "0")
}

// StreamEventJSON returns the whole Lambda payload {"Records":[…]} for recs,
// each built by StreamRecordJSON, in order.
func StreamEventJSON(recs []streamtypes.Record, streamARN, region string) ([]byte, error) {
	ev := lambdaStreamEvent{Records: make([]json.RawMessage, 0, len(recs))}
	for _, r := range recs {
		b, err := StreamRecordJSON(r, streamARN, region)
		if err != nil {
			return nil, err
		}
		ev.Records = append(ev.Records, b)
	}
	return json.Marshal(ev)
}

func attributeMapJSON(m map[string]streamtypes.AttributeValue) (map[string]json.RawMessage, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		b, err := attributeValueJSON(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = b
	}
	return out, nil
}

// attributeValueJSON renders one AttributeValue as DynamoDB JSON.
func attributeValueJSON(v streamtypes.AttributeValue) (json.RawMessage, error) {
	var w any
	switch a := v.(type) {
	case *streamtypes.AttributeValueMemberS:
		w = map[string]string{"S": a.Value}
	case *streamtypes.AttributeValueMemberN:
		w = map[string]string{"N": a.Value}
	case *streamtypes.AttributeValueMemberB:
		w = map[string][]byte{"B": a.Value} // encoding/json: standard base64
	case *streamtypes.AttributeValueMemberBOOL:
		w = map[string]bool{"BOOL": a.Value}
	case *streamtypes.AttributeValueMemberNULL:
		w = map[string]bool{"NULL": a.Value}
	case *streamtypes.AttributeValueMemberSS:
		w = map[string][]string{"SS": nonNil(a.Value)}
	case *streamtypes.AttributeValueMemberNS:
		w = map[string][]string{"NS": nonNil(a.Value)}
	case *streamtypes.AttributeValueMemberBS:
		bs := a.Value
		if bs == nil {
			bs = [][]byte{}
		}
		w = map[string][][]byte{"BS": bs}
	case *streamtypes.AttributeValueMemberM:
		m, err := attributeMapJSON(a.Value)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = map[string]json.RawMessage{}
		}
		w = map[string]map[string]json.RawMessage{"M": m}
	case *streamtypes.AttributeValueMemberL:
		l := make([]json.RawMessage, 0, len(a.Value))
		for i, e := range a.Value {
			b, err := attributeValueJSON(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l = append(l, b)
		}
		w = map[string][]json.RawMessage{"L": l}
	default:
		return nil, fmt.Errorf("unsupported attribute value type %T", v)
	}
	return json.Marshal(w)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
