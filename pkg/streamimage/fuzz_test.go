package streamimage_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// Numbers beyond int64 and float64 keep their exact text through every
// conversion: to SDK values, back to the events form, and to plain JSON.
func TestLosslessNumbers(t *testing.T) {
	t.Parallel()
	for _, n := range []string{
		"12345678901234567890123456789012345678", // 38 digits: beyond int64, rounds in float64
		"0.000000000000000000000000000000000001", // 38 fractional digits
		"-12345678901234567890123456789012345678",
		"9223372036854775808", // int64 max + 1
	} {
		img := map[string]events.DynamoDBAttributeValue{}
		if err := json.Unmarshal([]byte(`{"n":{"N":"`+n+`"},"ns":{"NS":["`+n+`","1"]}}`), &img); err != nil {
			t.Fatal(err)
		}
		item, err := streamimage.ToAttributeValueMap(img)
		if err != nil {
			t.Fatal(err)
		}
		if got := item["n"].(*types.AttributeValueMemberN).Value; got != n {
			t.Fatalf("N %s became %s", n, got)
		}
		if got := item["ns"].(*types.AttributeValueMemberNS).Value; !reflect.DeepEqual(got, []string{n, "1"}) {
			t.Fatalf("NS became %v", got)
		}
		js, err := streamimage.ToJSON(img)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(js), `"n":`+n) {
			t.Fatalf("plain JSON %s lost %s", js, n)
		}
		back, err := streamimage.FromAttributeValueMap(item)
		if err != nil || back["n"].Number() != n {
			t.Fatalf("back to events: %v %v", back, err)
		}
	}
}

// Every type, the empty and false ones included, survives a whole image,
// and an unknown type is an error, never a silent drop.
func TestLosslessAllTypes(t *testing.T) {
	t.Parallel()
	raw := `{"s":{"S":""},"n":{"N":"0"},"b":{"B":""},"ss":{"SS":[""]},"ns":{"NS":["-0.5"]},"bs":{"BS":["AA=="]},` +
		`"m":{"M":{}},"l":{"L":[]},"nul":{"NULL":true},"f":{"BOOL":false}}`
	img := map[string]events.DynamoDBAttributeValue{}
	if err := json.Unmarshal([]byte(raw), &img); err != nil {
		t.Fatal(err)
	}
	item, err := streamimage.ToAttributeValueMap(img)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]types.AttributeValue{
		"s":   &types.AttributeValueMemberS{Value: ""},
		"n":   &types.AttributeValueMemberN{Value: "0"},
		"b":   &types.AttributeValueMemberB{Value: []byte{}},
		"ss":  &types.AttributeValueMemberSS{Value: []string{""}},
		"ns":  &types.AttributeValueMemberNS{Value: []string{"-0.5"}},
		"bs":  &types.AttributeValueMemberBS{Value: [][]byte{{0}}},
		"m":   &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
		"l":   &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		"nul": &types.AttributeValueMemberNULL{Value: true},
		"f":   &types.AttributeValueMemberBOOL{Value: false},
	}
	if !reflect.DeepEqual(item, want) {
		t.Fatalf("got %#v\nwant %#v", item, want)
	}
	plain, err := streamimage.ToPlainMap(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"s", "l", "m", "f", "nul"} {
		if _, ok := plain[k]; !ok {
			t.Fatalf("plain map dropped %q: %v", k, plain)
		}
	}

	// An unknown type: the events decoder refuses it, and a value the
	// converter does not know is ErrUnsupportedType.
	var bad map[string]events.DynamoDBAttributeValue
	if err := json.Unmarshal([]byte(`{"x":{"X":"1"}}`), &bad); err == nil {
		if _, err := streamimage.ToAttributeValueMap(bad); !errors.Is(err, streamimage.ErrUnsupportedType) {
			t.Fatalf("unknown type: %v", err)
		}
	}
	if _, err := streamimage.FromAttributeValue(&types.UnknownUnionMember{Tag: "X"}); !errors.Is(err, streamimage.ErrUnsupportedType) {
		t.Fatalf("unknown SDK member: %v", err)
	}
}

// FuzzImageRoundTrip: any attribute value JSON that decodes converts without
// panic, and a converted value round-trips through the events form
// unchanged.
func FuzzImageRoundTrip(f *testing.F) {
	for _, s := range []string{
		`{"N":"12345678901234567890123456789012345678"}`, `{"N":"0.000000000000000000000000000000000001"}`,
		`{"S":""}`, `{"B":""}`, `{"SS":["a"]}`, `{"NS":["1"]}`, `{"BS":["AA=="]}`, `{"M":{}}`, `{"L":[]}`,
		`{"NULL":true}`, `{"BOOL":false}`, `{"M":{"a":{"L":[{"N":"-1E+125"},{"M":{"b":{"NULL":true}}}]}}}`, `{"X":"1"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v events.DynamoDBAttributeValue
		if err := json.Unmarshal(data, &v); err != nil {
			return
		}
		got, err := streamimage.ToAttributeValue(v)
		if err != nil {
			return
		}
		_, _ = streamimage.ToPlain(v)
		back, err := streamimage.FromAttributeValue(got)
		if err != nil {
			t.Fatalf("FromAttributeValue(%#v): %v", got, err)
		}
		again, err := streamimage.ToAttributeValue(back)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip: %#v -> %#v (%v)", got, again, err)
		}
	})
}
