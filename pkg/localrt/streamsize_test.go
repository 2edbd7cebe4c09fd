package localrt

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

func sAttr(v string) streamtypes.AttributeValue { return &streamtypes.AttributeValueMemberS{Value: v} }
func nAttr(v string) streamtypes.AttributeValue { return &streamtypes.AttributeValueMemberN{Value: v} }

// TestStreamRecordSizeBytes: the SizeBytes the local event source mapping
// reports is AWS's, not the server's. Every expectation is a record AWS
// produced: the Lambda developer guide's DynamoDB example event (with-ddb:
// Keys {Id: 101}, images with "Message") and events captured from
// eu-west-1 for each stream view type (github.com/Ankcorn/dynamodb-streams-test:
// Keys {pk: "a", sk: "b"}, images with "data"). They fit "the size of the
// Keys plus the images the record carries", each an item size as the
// DynamoDB developer guide counts it (CapacityUnitCalculations).
func TestStreamRecordSizeBytes(t *testing.T) {
	t.Parallel()
	docKeys := map[string]streamtypes.AttributeValue{"Id": nAttr("101")}
	docImage := func(msg string) map[string]streamtypes.AttributeValue {
		return map[string]streamtypes.AttributeValue{"Message": sAttr(msg), "Id": nAttr("101")}
	}
	keys := map[string]streamtypes.AttributeValue{"pk": sAttr("a"), "sk": sAttr("b")}
	image := func(data string) map[string]streamtypes.AttributeValue {
		return map[string]streamtypes.AttributeValue{"data": sAttr(data), "pk": sAttr("a"), "sk": sAttr("b")}
	}
	tests := []struct {
		name      string
		view      streamtypes.StreamViewType
		keys      map[string]streamtypes.AttributeValue
		new, old  map[string]streamtypes.AttributeValue
		sizeBytes int64
	}{
		{"with-ddb INSERT", "NEW_AND_OLD_IMAGES", docKeys, docImage("New item!"), nil, 26},
		{"with-ddb MODIFY", "NEW_AND_OLD_IMAGES", docKeys, docImage("This item has changed"), docImage("New item!"), 59},
		{"with-ddb REMOVE", "NEW_AND_OLD_IMAGES", docKeys, nil, docImage("This item has changed"), 38},
		{"captured KEYS_ONLY", "KEYS_ONLY", keys, nil, nil, 6},
		{"captured NEW_AND_OLD_IMAGES INSERT", "NEW_AND_OLD_IMAGES", keys, image("test"), nil, 20},
		{"captured NEW_AND_OLD_IMAGES MODIFY", "NEW_AND_OLD_IMAGES", keys, image("hello"), image("test"), 35},
		{"captured NEW_AND_OLD_IMAGES REMOVE", "NEW_AND_OLD_IMAGES", keys, nil, image("hello"), 21},
		{"captured NEW_IMAGE MODIFY", "NEW_IMAGE", keys, image("hello"), nil, 21},
		{"captured NEW_IMAGE REMOVE (keys only)", "NEW_IMAGE", keys, nil, nil, 6},
		{"captured OLD_IMAGE MODIFY", "OLD_IMAGE", keys, nil, image("test"), 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := streamtypes.Record{EventID: aws.String("e"), EventName: "MODIFY", Dynamodb: &streamtypes.StreamRecord{
				Keys: tc.keys, NewImage: tc.new, OldImage: tc.old, SequenceNumber: aws.String("100000000000000000001"),
				SizeBytes:      aws.Int64(999), // what the server said: not what AWS says
				StreamViewType: tc.view,
			}}
			raw, err := StreamRecordJSON(rec, "arn", "us-east-1")
			if err != nil {
				t.Fatal(err)
			}
			var got events.DynamoDBEventRecord
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if got.Change.SizeBytes != tc.sizeBytes {
				t.Fatalf("SizeBytes = %d, want %d (recorded on AWS)", got.Change.SizeBytes, tc.sizeBytes)
			}
		})
	}
}

// TestAttributeValueSize pins the item size rules of the DynamoDB developer
// guide ("Item sizes and formats"): strings and binaries by their bytes,
// numbers 1 byte plus 1 per two significant digits (the pairs aligned on the
// decimal point, one more for a negative number: the rule dynalite measured
// against DynamoDB; ❓ AWS documents it as "approximately"), true, false and
// null 1 byte, a list or map 3 bytes plus 1 per element, sets the sum of
// their elements.
func TestAttributeValueSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    streamtypes.AttributeValue
		want int64
	}{
		{"string bytes", sAttr("héllo"), 6},
		{"empty string", sAttr(""), 0},
		{"binary raw bytes", &streamtypes.AttributeValueMemberB{Value: []byte{0, 1, 2, 255}}, 4},
		{"zero", nAttr("0"), 1},
		{"one digit", nAttr("7"), 2},
		{"101", nAttr("101"), 3},
		{"trailing zeros trimmed", nAttr("1000000"), 2},
		{"leading zeros trimmed", nAttr("000123"), 3},
		{"four digits", nAttr("1234"), 3},
		{"four digits across the point", nAttr("123.4"), 4},
		{"fraction", nAttr("0.5"), 2},
		{"negative", nAttr("-1"), 3},
		{"exponent", nAttr("1.5E3"), 2},
		{"38 digits", nAttr("12345678901234567890123456789012345678"), 20},
		{"true", &streamtypes.AttributeValueMemberBOOL{Value: true}, 1},
		{"null", &streamtypes.AttributeValueMemberNULL{Value: true}, 1},
		{"string set", &streamtypes.AttributeValueMemberSS{Value: []string{"ab", "c"}}, 3},
		{"number set", &streamtypes.AttributeValueMemberNS{Value: []string{"1", "2.5"}}, 5},
		{"binary set", &streamtypes.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}}, 3},
		{"empty list", &streamtypes.AttributeValueMemberL{}, 3},
		{"list", &streamtypes.AttributeValueMemberL{Value: []streamtypes.AttributeValue{sAttr("x"), nAttr("7")}}, 3 + 1 + 1 + 1 + 2},
		{"map", &streamtypes.AttributeValueMemberM{Value: map[string]streamtypes.AttributeValue{"ab": sAttr("x")}}, 3 + 1 + 2 + 1},
	}
	for _, tc := range tests {
		if got := attributeValueSize(tc.v); got != tc.want {
			t.Errorf("%s: size = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPollerReportsAWSSizeBytes: through the event source mapping emulator
// against Dynoxide, the captured eu-west-1 records come out with AWS's
// SizeBytes (the server's own figure was 1.6–2.3 times larger).
func TestPollerReportsAWSSizeBytes(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	table := ddbtest.Name("sizebytes")
	env.CreateTable(t, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
		},
		KeySchema: []ddbtypes.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: ddbtypes.KeyTypeRange},
		},
		StreamSpecification: &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeNewImage},
	})
	ctx := context.Background()
	key := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "a"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "b"}}
	put := func(data string) {
		item := map[string]ddbtypes.AttributeValue{"data": &ddbtypes.AttributeValueMemberS{Value: data}}
		for k, v := range key {
			item[k] = v
		}
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put("test")
	put("hello")
	if _, err := env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p, err := NewStreamPoller(StreamPollerConfig{
		Streams: env.Streams, TableName: table, Tables: env.DDB, DisableFilter: true,
		PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	want := map[string]int64{"INSERT": 20, "MODIFY": 21, "REMOVE": 6} // captured NEW_IMAGE records
	var n int
	for _, b := range rec.calls() {
		for _, r := range b {
			n++
			if r.Change.SizeBytes != want[r.EventName] {
				t.Errorf("%s: SizeBytes = %d, want %d (recorded on AWS for the same item and view type)", r.EventName, r.Change.SizeBytes, want[r.EventName])
			}
		}
	}
	if n != 3 {
		t.Fatalf("delivered %d records, want 3", n)
	}
}
