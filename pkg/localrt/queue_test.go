package localrt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
)

// TestMemoryQueueRefusesWhatSQSRefuses sends bodies and attributes SQS
// refuses (Amazon SQS message quotas; MessageAttributeValue) and checks the
// local queue refuses them too, with SQS's error code, storing nothing.
func TestMemoryQueueRefusesWhatSQSRefuses(t *testing.T) {
	t.Parallel()
	const url = "https://sqs.local/q"
	str := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	cases := []struct {
		name  string
		body  string
		attrs map[string]sqstypes.MessageAttributeValue
		max   int    // MaximumMessageSize; 0 keeps the default
		code  string // "" means accepted
	}{
		{"plain", `{"a":"b"}`, nil, 0, ""},
		{"tab newline return", "a\tb\nc\r", nil, 0, ""},
		{"top of BMP allowed", "\uFFFD\U0001F600\U0010FFFF", nil, 0, ""},
		{"U+FFFE", "x\uFFFEy", nil, 0, "InvalidMessageContents"},
		{"U+FFFF", "x\uFFFFy", nil, 0, "InvalidMessageContents"},
		{"NUL", "x\x00y", nil, 0, "InvalidMessageContents"},
		{"control char", "x\x1fy", nil, 0, "InvalidMessageContents"},
		{"invalid UTF-8", "x\xffy", nil, 0, "InvalidMessageContents"},
		{"encoded surrogate", "x\xed\xa0\x80y", nil, 0, "InvalidMessageContents"},
		{"escaped surrogate is ASCII", `{"a":"\ud800"}`, nil, 0, ""},
		{"exactly the default limit", strings.Repeat("a", sqsmsg.DefaultMaxBytes), nil, 0, ""},
		{"one byte over the default limit", strings.Repeat("a", sqsmsg.DefaultMaxBytes+1), nil, 0, "InvalidParameterValue"},
		{"attributes count toward the size", strings.Repeat("a", sqsmsg.DefaultMaxBytes-len("k")-len("String")-len("v")),
			map[string]sqstypes.MessageAttributeValue{"k": str("v")}, 0, ""},
		{"attributes push it over", strings.Repeat("a", sqsmsg.DefaultMaxBytes-len("k")-len("String")-len("v")+1),
			map[string]sqstypes.MessageAttributeValue{"k": str("v")}, 0, "InvalidParameterValue"},
		{"binary attribute counts", strings.Repeat("a", 1024-len("b")-len("Binary")-4+1),
			map[string]sqstypes.MessageAttributeValue{"b": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 3}}}, 1024, "InvalidParameterValue"},
		{"smaller queue limit", strings.Repeat("a", 1025), nil, 1024, "InvalidParameterValue"},
		{"larger queue limit", strings.Repeat("a", sqsmsg.MaxMaxBytes), nil, sqsmsg.MaxMaxBytes, ""},
		{"over the largest limit", strings.Repeat("a", sqsmsg.MaxMaxBytes+1), nil, sqsmsg.MaxMaxBytes, "InvalidParameterValue"},
		{"attribute value U+FFFF", "b", map[string]sqstypes.MessageAttributeValue{"k": str("\uFFFF")}, 0, "InvalidParameterValue"},
		{"empty attribute value", "b", map[string]sqstypes.MessageAttributeValue{"k": str("")}, 0, "InvalidParameterValue"},
		{"attribute without data type", "b", map[string]sqstypes.MessageAttributeValue{"k": {StringValue: aws.String("v")}}, 0, "InvalidParameterValue"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := NewMemoryQueue(url)
			if c.max != 0 {
				if err := q.SetMaxMessageBytes(c.max); err != nil {
					t.Fatal(err)
				}
			}
			_, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String(c.body), MessageAttributes: c.attrs,
			})
			if c.code == "" {
				if err != nil || q.Len() != 1 {
					t.Fatalf("SendMessage = %v (stored %d), want accepted", err, q.Len())
				}
				return
			}
			var apiErr *smithy.GenericAPIError
			if !errors.As(err, &apiErr) || apiErr.Code != c.code || apiErr.Fault != smithy.FaultClient {
				t.Fatalf("SendMessage = %v, want client fault %s", err, c.code)
			}
			if q.Len() != 0 {
				t.Errorf("refused message stored")
			}
		})
	}
}

func TestMemoryQueueMaxMessageBytesRange(t *testing.T) {
	t.Parallel()
	q := NewMemoryQueue("")
	if q.MaxMessageBytes() != sqsmsg.DefaultMaxBytes {
		t.Errorf("default MaximumMessageSize = %d, want %d", q.MaxMessageBytes(), sqsmsg.DefaultMaxBytes)
	}
	for _, n := range []int{0, sqsmsg.MinMaxBytes - 1, sqsmsg.MaxMaxBytes + 1} {
		if err := q.SetMaxMessageBytes(n); err == nil {
			t.Errorf("SetMaxMessageBytes(%d) accepted", n)
		}
	}
	if q.MaxMessageBytes() != sqsmsg.DefaultMaxBytes {
		t.Errorf("refused value changed the limit to %d", q.MaxMessageBytes())
	}
	if err := q.SetMaxMessageBytes(sqsmsg.MinMaxBytes); err != nil || q.MaxMessageBytes() != sqsmsg.MinMaxBytes {
		t.Errorf("SetMaxMessageBytes(min) = %v, limit %d", err, q.MaxMessageBytes())
	}
}
