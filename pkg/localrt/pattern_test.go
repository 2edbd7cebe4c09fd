package localrt

import (
	"errors"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/routing"
)

func TestPatternOperators(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pattern string
		event   string
		want    bool
	}{
		{"exact string", `{"a":["x","y"]}`, `{"a":"y"}`, true},
		{"exact string miss", `{"a":["x"]}`, `{"a":"z"}`, false},
		{"missing key", `{"a":["x"]}`, `{"b":"x"}`, false},
		{"number exact big", `{"n":[12345678901234567890123456789012345678]}`, `{"n":12345678901234567890123456789012345678}`, true},
		{"number neighbour", `{"n":[12345678901234567890123456789012345678]}`, `{"n":12345678901234567890123456789012345679}`, false},
		{"number 1 equals 1.0", `{"n":[1]}`, `{"n":1.0}`, true},
		{"number vs string", `{"n":[1]}`, `{"n":"1"}`, false},
		{"bool", `{"b":[true]}`, `{"b":true}`, true},
		{"bool miss", `{"b":[true]}`, `{"b":false}`, false},
		{"null", `{"v":[null]}`, `{"v":null}`, true},
		{"null not missing", `{"v":[null]}`, `{}`, false},
		{"empty string", `{"v":[""]}`, `{"v":""}`, true},
		{"exists true", `{"a":[{"exists":true}]}`, `{"a":"x"}`, true},
		{"exists true missing", `{"a":[{"exists":true}]}`, `{}`, false},
		{"exists true on object", `{"a":[{"exists":true}]}`, `{"a":{"S":"x"}}`, false},
		{"exists false missing", `{"a":[{"exists":false}]}`, `{}`, true},
		{"exists false present", `{"a":[{"exists":false}]}`, `{"a":1}`, false},
		{"prefix", `{"a":[{"prefix":"OUT"}]}`, `{"a":"OUTBOX#1"}`, true},
		{"prefix miss", `{"a":[{"prefix":"OUT"}]}`, `{"a":"IN"}`, false},
		{"prefix on number", `{"a":[{"prefix":"1"}]}`, `{"a":12}`, false},
		{"suffix", `{"a":[{"suffix":".png"}]}`, `{"a":"x.png"}`, true},
		{"equals-ignore-case", `{"a":[{"equals-ignore-case":"insert"}]}`, `{"a":"INSERT"}`, true},
		{"anything-but scalar", `{"a":[{"anything-but":"x"}]}`, `{"a":"y"}`, true},
		{"anything-but scalar hit", `{"a":[{"anything-but":"x"}]}`, `{"a":"x"}`, false},
		{"anything-but list", `{"a":[{"anything-but":["x","y"]}]}`, `{"a":"y"}`, false},
		{"anything-but list pass", `{"a":[{"anything-but":["x","y"]}]}`, `{"a":"z"}`, true},
		{"anything-but missing", `{"a":[{"anything-but":["x"]}]}`, `{}`, false},
		{"anything-but prefix", `{"a":[{"anything-but":{"prefix":"aws."}}]}`, `{"a":"aws.events"}`, false},
		{"anything-but number", `{"a":[{"anything-but":[1]}]}`, `{"a":2}`, true},
		{"alternatives ORed", `{"a":["x",{"prefix":"p"}]}`, `{"a":"pq"}`, true},
		{"event array any element", `{"a":["x"]}`, `{"a":["w","x"]}`, true},
		{"event array none", `{"a":["x"]}`, `{"a":["w","v"]}`, false},
		{"nested", `{"d":{"e":{"f":["1"]}}}`, `{"d":{"e":{"f":"1"}}}`, true},
		{"nested missing object", `{"d":{"e":["1"]}}`, `{"d":"e"}`, false},
		{"every key must match", `{"a":["x"],"b":["y"]}`, `{"a":"x","b":"z"}`, false},
		{"$or first", `{"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"a":"x"}`, true},
		{"$or second", `{"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"b":"y"}`, true},
		{"$or none", `{"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"a":"y"}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := CompilePattern(tc.pattern)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got, err := p.MatchJSON([]byte(tc.event))
			if err != nil {
				t.Fatalf("match: %v", err)
			}
			if got != tc.want {
				t.Fatalf("%s on %s = %v, want %v", tc.pattern, tc.event, got, tc.want)
			}
		})
	}
}

func TestCompilePatternRejects(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		`[]`, `{}`, `{"a":[]}`, `{"a":"x"}`, `{"a":[{"numeric":[">",1]}]}`, `{"a":[{"exists":"yes"}]}`,
		`{"a":[{"prefix":1}]}`, `{"a":[{"prefix":"x","suffix":"y"}]}`, `{"$or":[{"a":["x"]}]}`, `{"a":[[1]]}`, `not json`,
	} {
		if _, err := CompilePattern(p); !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("CompilePattern(%s) error = %v, want ErrInvalidPattern", p, err)
		}
	}
}

// lambdaRecordJSON returns a DynamoDB Streams record as Lambda delivers it.
func lambdaRecordJSON(eventName, newImage, userIdentity string) string {
	s := `{"eventID":"e1","eventName":"` + eventName + `","eventVersion":"1.1","eventSource":"aws:dynamodb","awsRegion":"us-east-1",` +
		`"dynamodb":{"ApproximateCreationDateTime":1693997155,"Keys":{"pk":{"S":"Order#1"},"sk":{"S":"x"}},`
	if newImage != "" {
		s += `"NewImage":` + newImage + `,`
	}
	s += `"SequenceNumber":"1","SizeBytes":10,"StreamViewType":"NEW_IMAGE"}`
	if userIdentity != "" {
		s += `,"userIdentity":` + userIdentity
	}
	return s + `,"eventSourceARN":"arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/x"}`
}

func TestStreamFilterPattern(t *testing.T) {
	t.Parallel()
	p := MustCompilePattern(outbox.StreamFilterPattern())
	outboxImage := `{"pk":{"S":"Order#1"},"event_id":{"S":"0190-id"},"sequence":{"N":"1"}}`
	publishedImage := `{"pk":{"S":"Order#1"},"event_id":{"S":"0190-id"},"status":{"S":"PUBLISHED"}}`
	foreignImage := `{"pk":{"S":"Order#1"},"status":{"S":"PLACED"}}`
	ttl := `{"type":"Service","principalId":"dynamodb.amazonaws.com"}`
	tests := []struct {
		name, record string
		want         bool
	}{
		{"INSERT of an outbox item", lambdaRecordJSON("INSERT", outboxImage, ""), true},
		{"MODIFY (relay marks published)", lambdaRecordJSON("MODIFY", publishedImage, ""), false},
		{"REMOVE (TTL deletion)", lambdaRecordJSON("REMOVE", "", ttl), false},
		{"REMOVE (user delete)", lambdaRecordJSON("REMOVE", "", ""), false},
		{"INSERT of a foreign item", lambdaRecordJSON("INSERT", foreignImage, ""), false},
		{"INSERT with event_id of the wrong type", lambdaRecordJSON("INSERT", `{"event_id":{"N":"1"}}`, ""), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := p.MatchJSON([]byte(tc.record))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRoutingRulePatterns(t *testing.T) {
	t.Parallel()
	event := func(source, detailType string) string {
		return `{"version":"0","id":"x","detail-type":"` + detailType + `","source":"` + source +
			`","account":"000000000000","time":"2024-01-01T00:00:00Z","region":"us-east-1","resources":[],"detail":{"event_id":"e"}}`
	}
	src := config.DefaultEventSource
	want := map[string]map[string]bool{ // consumer → detail type → delivered
		routing.ConsumerLedger: {
			order.EventOrderPlaced: false, order.EventOrderPaid: true, order.EventOrderShipped: false, order.EventOrderCancelled: true,
		},
		routing.ConsumerNotifier: {
			order.EventOrderPlaced: true, order.EventOrderPaid: true, order.EventOrderShipped: true, order.EventOrderCancelled: true,
		},
	}
	for _, r := range routing.Rules() {
		p := MustCompilePattern(r.Pattern(src))
		for dt, exp := range want[r.Consumer] {
			got, err := p.MatchJSON([]byte(event(src, dt)))
			if err != nil {
				t.Fatal(err)
			}
			if got != exp {
				t.Errorf("rule %s, %s: match = %v, want %v", r.Name, dt, got, exp)
			}
			if got, _ := p.MatchJSON([]byte(event("com.other", dt))); got {
				t.Errorf("rule %s matched a foreign source", r.Name)
			}
		}
		if got, _ := p.MatchJSON([]byte(event(src, "Unknown"))); got {
			t.Errorf("rule %s matched an unknown detail type", r.Name)
		}
	}
}

func TestCompareSequenceNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"9", "10", -1}, // lexically "9" > "10"
		{"10", "9", 1},
		{"000000000000000000021", "21", 0},
		{"100000000000000000000000000000000000001", "99999999999999999999999999999999999999", 1},
		{"", "1", -1},
	}
	for _, tc := range tests {
		if got := CompareSequenceNumbers(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q,%q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
