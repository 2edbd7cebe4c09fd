package streamimage_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// decode parses one attribute value in the DynamoDB JSON shape Lambda sends.
func decode(t *testing.T, s string) events.DynamoDBAttributeValue {
	t.Helper()
	var v events.DynamoDBAttributeValue
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("unmarshal %s: %v", s, err)
	}
	return v
}

func TestToAttributeValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want types.AttributeValue
	}{
		{"string", `{"S":"x"}`, &types.AttributeValueMemberS{Value: "x"}},
		{"empty string", `{"S":""}`, &types.AttributeValueMemberS{Value: ""}},
		{"big number kept exact", `{"N":"123456789012345678901234567890.12345678"}`, &types.AttributeValueMemberN{Value: "123456789012345678901234567890.12345678"}},
		{"38 digits", `{"N":"-99999999999999999999999999999999999999"}`, &types.AttributeValueMemberN{Value: "-99999999999999999999999999999999999999"}},
		{"tiny exponent", `{"N":"1E-130"}`, &types.AttributeValueMemberN{Value: "1E-130"}},
		{"binary", `{"B":"AQID"}`, &types.AttributeValueMemberB{Value: []byte{1, 2, 3}}},
		{"empty binary", `{"B":""}`, &types.AttributeValueMemberB{Value: []byte{}}},
		{"bool false", `{"BOOL":false}`, &types.AttributeValueMemberBOOL{Value: false}},
		{"bool true", `{"BOOL":true}`, &types.AttributeValueMemberBOOL{Value: true}},
		{"null", `{"NULL":true}`, &types.AttributeValueMemberNULL{Value: true}},
		{"string set", `{"SS":["a","b"]}`, &types.AttributeValueMemberSS{Value: []string{"a", "b"}}},
		{"number set", `{"NS":["1","12345678901234567890123456789012345678"]}`, &types.AttributeValueMemberNS{Value: []string{"1", "12345678901234567890123456789012345678"}}},
		{"binary set", `{"BS":["AQ==","Ag=="]}`, &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2}}}},
		{"empty list", `{"L":[]}`, &types.AttributeValueMemberL{Value: []types.AttributeValue{}}},
		{"empty map", `{"M":{}}`, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}},
		{"nested", `{"M":{"l":{"L":[{"S":""},{"N":"0"},{"NULL":true},{"M":{}}]},"b":{"BOOL":false}}}`,
			&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{
					&types.AttributeValueMemberS{Value: ""},
					&types.AttributeValueMemberN{Value: "0"},
					&types.AttributeValueMemberNULL{Value: true},
					&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
				}},
				"b": &types.AttributeValueMemberBOOL{Value: false},
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := streamimage.ToAttributeValue(decode(t, tt.in))
			if err != nil {
				t.Fatalf("ToAttributeValue: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, want %#v", got, tt.want)
			}
			// Round trip back to the events form and its JSON.
			back, err := streamimage.FromAttributeValue(got)
			if err != nil {
				t.Fatalf("FromAttributeValue: %v", err)
			}
			b, err := json.Marshal(back)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			again, err := streamimage.ToAttributeValue(decode(t, string(b)))
			if err != nil {
				t.Fatalf("second ToAttributeValue: %v", err)
			}
			if !reflect.DeepEqual(again, tt.want) {
				t.Fatalf("round trip: got %#v, want %#v", again, tt.want)
			}
		})
	}
}

func TestToAttributeValueErrors(t *testing.T) {
	t.Parallel()
	if _, err := streamimage.ToAttributeValue(events.DynamoDBAttributeValue{}); !errors.Is(err, streamimage.ErrUnsupportedType) {
		t.Fatalf("zero value: got %v, want ErrUnsupportedType", err)
	}
	img := map[string]events.DynamoDBAttributeValue{
		"ok":  events.NewStringAttribute("x"),
		"bad": events.NewListAttribute([]events.DynamoDBAttributeValue{{}}),
	}
	if _, err := streamimage.ToAttributeValueMap(img); !errors.Is(err, streamimage.ErrUnsupportedType) {
		t.Fatalf("nested zero value: got %v, want ErrUnsupportedType", err)
	}
	if _, err := streamimage.FromAttributeValue(&types.UnknownUnionMember{Tag: "X"}); !errors.Is(err, streamimage.ErrUnsupportedType) {
		t.Fatalf("unknown member: got %v, want ErrUnsupportedType", err)
	}
	if _, err := streamimage.ToJSON(map[string]events.DynamoDBAttributeValue{"n": events.NewNumberAttribute("abc")}); !errors.Is(err, streamimage.ErrInvalidNumber) {
		t.Fatalf("bad number: got %v, want ErrInvalidNumber", err)
	}
}

// TestStreamRecordImage decodes a whole stream record in Lambda's shape and
// converts its NewImage.
func TestStreamRecordImage(t *testing.T) {
	t.Parallel()
	const record = `{"Records":[{"eventID":"1","eventName":"INSERT","eventVersion":"1.1","eventSource":"aws:dynamodb","awsRegion":"us-east-1",
	"dynamodb":{"ApproximateCreationDateTime":1693997155.0,"Keys":{"pk":{"S":"Order#1"}},
	"NewImage":{"pk":{"S":"Order#1"},"amount":{"N":"123456789012345678901234567890.12345678"},"note":{"S":""},"flag":{"BOOL":false},
	"tags":{"SS":["a"]},"nums":{"NS":["1.5","2"]},"bin":{"B":"AQID"},"bins":{"BS":["AQ=="]},"nil":{"NULL":true},"l":{"L":[]},"m":{"M":{}}},
	"SequenceNumber":"111111111111111111111","SizeBytes":26,"StreamViewType":"NEW_IMAGE"}}]}`
	var ev events.DynamoDBEvent
	if err := json.Unmarshal([]byte(record), &ev); err != nil {
		t.Fatal(err)
	}
	img := ev.Records[0].Change.NewImage
	item, err := streamimage.ToAttributeValueMap(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(item) != len(img) {
		t.Fatalf("got %d attributes, want %d", len(item), len(img))
	}
	if n := item["amount"].(*types.AttributeValueMemberN).Value; n != "123456789012345678901234567890.12345678" {
		t.Fatalf("amount = %s", n)
	}
	js, err := streamimage.ToJSON(img)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"amount":123456789012345678901234567890.12345678,"bin":"AQID","bins":["AQ=="],"flag":false,"l":[],"m":{},"nil":null,"note":"","nums":[1.5,2],"pk":"Order#1","tags":["a"]}`
	if string(js) != want {
		t.Fatalf("ToJSON:\n got %s\nwant %s", js, want)
	}
}

func ExampleToJSON() {
	var img map[string]events.DynamoDBAttributeValue
	_ = json.Unmarshal([]byte(`{"id":{"S":"x"},"n":{"N":"123456789012345678901234567890.12345678"}}`), &img)
	b, _ := streamimage.ToJSON(img)
	fmt.Println(string(b))
	// Output: {"id":"x","n":123456789012345678901234567890.12345678}
}
