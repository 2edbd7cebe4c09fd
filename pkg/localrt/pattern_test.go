package localrt

import (
	"errors"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// patternCase is one pattern/event pair with AWS's answer. aws names where
// the expectation comes from: "recorded" (observed on real AWS), or the AWS
// document that states it.
type patternCase struct {
	name    string
	pattern string
	event   string
	want    bool
	aws     string
}

const (
	recorded   = "recorded on AWS"
	docPattern = "eb-event-patterns (Create event patterns)"
	docContent = "eb-event-patterns-content-based-filtering"
	docArrays  = "eb-event-patterns-arrays"
	docRuler   = "Event Ruler README (the EventBridge engine)"
	docLambda  = "Lambda invocation-eventfiltering"
	docSNS     = "SNS numeric-value-matching (same pattern engine)"
	// docRulerCode: Event Ruler's source, where its README is silent:
	// JsonRuleCompiler adds numericEquals beside the literal for a number
	// in a rule; ByteMachine matches anything-but string forms against
	// quoted strings only, and numeric anything-but only against values
	// it could read as numbers.
	docRulerCode = "Event Ruler source (JsonRuleCompiler, ByteMachine)"
)

func runPatternCases(t *testing.T, d PatternDialect, tests []patternCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := CompilePatternFor(tc.pattern, d)
			if err != nil {
				t.Fatalf("compile %s: %v", tc.pattern, err)
			}
			got, err := p.MatchJSON([]byte(tc.event))
			if err != nil {
				t.Fatalf("match: %v", err)
			}
			if got != tc.want {
				t.Fatalf("%s on %s = %v, want %v (%s)", tc.pattern, tc.event, got, tc.want, tc.aws)
			}
		})
	}
}

func TestPatternOperators(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"exact string", `{"a":["x","y"]}`, `{"a":"y"}`, true, docPattern},
		{"exact string miss", `{"a":["x"]}`, `{"a":"z"}`, false, docPattern},
		{"exact string is case-sensitive", `{"a":["x"]}`, `{"a":"X"}`, false, docPattern},
		{"missing key", `{"a":["x"]}`, `{"b":"x"}`, false, docPattern},
		{"number same text big", `{"n":[12345678901234567890123456789012345678]}`, `{"n":12345678901234567890123456789012345678}`, true, docPattern},
		{"number neighbour", `{"n":[12345678901234567890123456789012345678]}`, `{"n":12345678901234567890123456789012345679}`, false, docPattern},
		{"number 300 vs 300", `{"n":[300]}`, `{"n":300}`, true, docPattern},
		{"number 300 vs 300.0: equal (the user guide says not; AWS answered true)", `{"n":[300]}`, `{"n":300.0}`, true, recorded},
		{"number 300 vs 3.0e2: equal", `{"n":[300]}`, `{"n":3.0e2}`, true, docRulerCode},
		{"number 3.0e2 vs 300: equal", `{"n":[3.0e2]}`, `{"n":300}`, true, docRulerCode},
		{"number equal to six decimal places", `{"n":[1.5]}`, `{"n":1.5000001}`, true, docRulerCode},
		{"number differs at the sixth decimal", `{"n":[1.5]}`, `{"n":1.500001}`, false, docRulerCode},
		{"number past 5.0e9: by its text", `{"n":[6000000000]}`, `{"n":6000000000}`, true, docRulerCode},
		{"number past 5.0e9: other text", `{"n":[6000000000]}`, `{"n":6.0e9}`, false, docRulerCode},
		{"number vs string", `{"n":[1]}`, `{"n":"1"}`, false, docPattern},
		{"string vs number", `{"n":["1"]}`, `{"n":1}`, false, docPattern},
		{"bool", `{"b":[true]}`, `{"b":true}`, true, docPattern},
		{"bool miss", `{"b":[true]}`, `{"b":false}`, false, docPattern},
		{"bool vs string", `{"b":[true]}`, `{"b":"true"}`, false, docPattern},
		{"null", `{"v":[null]}`, `{"v":null}`, true, "eb-event-patterns-null-values"},
		{"null not missing", `{"v":[null]}`, `{}`, false, "eb-event-patterns-null-values"},
		{"null not empty string", `{"v":[null]}`, `{"v":""}`, false, "eb-event-patterns-null-values"},
		{"empty string", `{"v":[""]}`, `{"v":""}`, true, "eb-event-patterns-null-values"},
		{"exists true", `{"a":[{"exists":true}]}`, `{"a":"x"}`, true, docContent},
		{"exists true on null", `{"a":[{"exists":true}]}`, `{"a":null}`, true, docRuler},
		{"exists true missing", `{"a":[{"exists":true}]}`, `{}`, false, docContent},
		{"exists true on object (not a leaf)", `{"a":[{"exists":true}]}`, `{"a":{"S":"x"}}`, false, docContent},
		{"exists false missing", `{"a":[{"exists":false}]}`, `{}`, true, docContent},
		{"exists false present", `{"a":[{"exists":false}]}`, `{"a":1}`, false, docContent},
		{"exists false on object (not a leaf)", `{"detail":{"c-count":[{"exists":false}]}}`, `{"detail":{"c-count":{"c1":100}}}`, true, docContent},
		{"exists false or value, absent", `{"a":["x",{"exists":false}]}`, `{}`, true, docRuler},
		{"exists false or value, other value", `{"a":["x",{"exists":false}]}`, `{"a":"y"}`, false, docRuler},
		{"prefix", `{"a":[{"prefix":"OUT"}]}`, `{"a":"OUTBOX#1"}`, true, docContent},
		{"prefix miss", `{"a":[{"prefix":"OUT"}]}`, `{"a":"IN"}`, false, docContent},
		{"prefix is case-sensitive", `{"a":[{"prefix":"OUT"}]}`, `{"a":"outbox"}`, false, docPattern},
		{"prefix on number", `{"a":[{"prefix":"1"}]}`, `{"a":12}`, false, docContent},
		{"suffix", `{"a":[{"suffix":".png"}]}`, `{"a":"x.png"}`, true, docContent},
		{"suffix miss", `{"a":[{"suffix":".png"}]}`, `{"a":"x.PNG"}`, false, docContent},
		{"equals-ignore-case", `{"a":[{"equals-ignore-case":"insert"}]}`, `{"a":"INSERT"}`, true, docContent},
		{"equals-ignore-case miss", `{"a":[{"equals-ignore-case":"insert"}]}`, `{"a":"INSERTS"}`, false, docContent},
		{"equals-ignore-case on number", `{"a":[{"equals-ignore-case":"1"}]}`, `{"a":1}`, false, docContent},
		{"prefix equals-ignore-case", `{"s":[{"prefix":{"equals-ignore-case":"EventB"}}]}`, `{"s":"eventbridge"}`, true, docContent},
		{"prefix equals-ignore-case miss", `{"s":[{"prefix":{"equals-ignore-case":"EventB"}}]}`, `{"s":"event"}`, false, docContent},
		{"suffix equals-ignore-case", `{"f":[{"suffix":{"equals-ignore-case":".png"}}]}`, `{"f":"A.PNG"}`, true, docContent},
		{"suffix equals-ignore-case miss", `{"f":[{"suffix":{"equals-ignore-case":".png"}}]}`, `{"f":"A.PNGX"}`, false, docContent},
		{"alternatives ORed", `{"a":["x",{"prefix":"p"}]}`, `{"a":"pq"}`, true, docPattern},
		{"nested", `{"d":{"e":{"f":["1"]}}}`, `{"d":{"e":{"f":"1"}}}`, true, docPattern},
		{"nested missing object", `{"d":{"e":["1"]}}`, `{"d":"e"}`, false, docPattern},
		{"leaf pattern on object value", `{"d":["e"]}`, `{"d":{"e":"e"}}`, false, docPattern},
		{"every key must match", `{"a":["x"],"b":["y"]}`, `{"a":"x","b":"z"}`, false, docPattern},
		{"$or first", `{"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"a":"x"}`, true, docContent},
		{"$or second", `{"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"b":"y"}`, true, docContent},
		{"$or none", `{"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"a":"y"}`, false, docContent},
		{"$or with and beside", `{"s":["c"],"$or":[{"a":["x"]},{"b":["y"]}]}`, `{"s":"d","a":"x"}`, false, docContent},
		{"$or nested in object", `{"detail":{"$or":[{"a":["x"]},{"b":[{"numeric":[">",1]}]}]}}`, `{"detail":{"b":2}}`, true, docContent},
		{"$or alternative with and inside", `{"$or":[{"a":["x"],"c":["z"]},{"b":["y"]}]}`, `{"a":"x","c":"w"}`, false, docContent},
	})
}

// TestPatternRecordedDifferences holds the inputs recorded against AWS on
// which the earlier matcher answered differently.
func TestPatternRecordedDifferences(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"exists true in an array of objects", `{"detail":{"items":{"id":[{"exists":true}]}}}`,
			`{"detail":{"items":[{"sku":"a"},{"id":"i-2","sku":"b"}]}}`, true, recorded},
		{"exists true in an array of objects, none has it", `{"detail":{"items":{"id":[{"exists":true}]}}}`,
			`{"detail":{"items":[{"sku":"a"},{"sku":"b"}]}}`, false, docArrays},
		{"exists false with the parent object absent", `{"detail":{"state":{"reason":[{"exists":false}]}}}`,
			`{"detail":{"other":1}}`, true, recorded},
		{"exists false with detail absent", `{"detail":{"c-count":[{"exists":false}]}}`, `{"source":"x"}`, true, recorded},
		{"dotted event key, nested pattern", `{"detail":{"state":{"status":["running"]}}}`,
			`{"detail":{"state.status":"running"}}`, true, recorded},
		{"dotted pattern key, nested event", `{"detail":{"state.status":["running"]}}`,
			`{"detail":{"state":{"status":"running"}}}`, true, recorded},
		{"exists true on an empty array", `{"resources":[{"exists":true}]}`, `{"resources":[]}`, false, recorded},
		{"exists false on an empty array", `{"resources":[{"exists":false}]}`, `{"resources":[]}`, true, docRuler},
		{"exists true on a non-empty array", `{"resources":[{"exists":true}]}`, `{"resources":["arn:x"]}`, true, docArrays},
	})
	for _, p := range []string{
		`{"a":[{"anything-but":{"prefix":""}}]}`,
		`{"a":[{"anything-but":{"suffix":""}}]}`,
	} {
		if _, err := CompilePattern(p); !errors.Is(err, ErrInvalidPattern) || !strings.Contains(err.Error(), "anything-but") {
			t.Errorf("CompilePattern(%s) error = %v, want ErrInvalidPattern naming anything-but (%s: Null prefix/suffix not allowed)", p, err, recorded)
		}
	}
}

func TestPatternArrays(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"event array any element", `{"a":["x"]}`, `{"a":["w","x"]}`, true, docArrays},
		{"event array none", `{"a":["x"]}`, `{"a":["w","v"]}`, false, docArrays},
		{"pattern and event arrays intersect", `{"resources":["r1","r2"]}`, `{"resources":["r0","r2"]}`, true, docArrays},
		{"array of objects", `{"employees":{"firstName":["Anna"]}}`,
			`{"employees":[{"firstName":"John"},{"firstName":"Anna"}]}`, true, docRuler},
		{"nested arrays of objects", `{"employees":{"firstName":["Peter"]}}`,
			`{"employees":[[{"firstName":"John"}],[{"firstName":"Peter"}]]}`, true, docRuler},
		{"fields from different elements do not combine", `{"employees":{"firstName":["Anna"],"lastName":["Jones"]}}`,
			`{"employees":[{"firstName":"Anna","lastName":"Smith"},{"firstName":"Peter","lastName":"Jones"}]}`, false, docRuler},
		{"fields from one element combine", `{"employees":{"firstName":["Anna"],"lastName":["Smith"]}}`,
			`{"employees":[{"firstName":"Anna","lastName":"Smith"},{"firstName":"Peter","lastName":"Jones"}]}`, true, docRuler},
		{"prefix on an array element", `{"a":[{"prefix":"p"}]}`, `{"a":[1,"pq"]}`, true, docArrays},
		{"anything-but: one element not excluded", `{"price":[{"anything-but":[100,500]}]}`, `{"price":[100,50]}`, true, docSNS},
		{"anything-but: every element excluded", `{"price":[{"anything-but":[100,500]}]}`, `{"price":[100,500]}`, false, docSNS},
	})
}

func TestPatternNumeric(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"range inside", `{"c":[{"numeric":[">",0,"<=",5]}]}`, `{"c":5}`, true, docContent},
		{"range open bottom", `{"c":[{"numeric":[">",0,"<=",5]}]}`, `{"c":0}`, false, docContent},
		{"range above", `{"c":[{"numeric":[">",0,"<=",5]}]}`, `{"c":5.5}`, false, docContent},
		{"range closed bottom", `{"c":[{"numeric":[">=",0,"<",5]}]}`, `{"c":0}`, true, docContent},
		{"range open top", `{"c":[{"numeric":[">=",0,"<",5]}]}`, `{"c":5}`, false, docContent},
		{"less than", `{"d":[{"numeric":["<",10]}]}`, `{"d":-3}`, true, docContent},
		{"greater or equal", `{"d":[{"numeric":[">=",10]}]}`, `{"d":10}`, true, docContent},
		{"equals", `{"p":[{"numeric":["=",100]}]}`, `{"p":100}`, true, docLambda},
		{"equals other text of the same number", `{"p":[{"numeric":["=",100]}]}`, `{"p":1.0e2}`, true, docSNS},
		{"equals 3.018e2 and 301.8", `{"x":[{"numeric":["=",3.018e2]}]}`, `{"x":301.8}`, true, docRuler},
		{"equals miss", `{"p":[{"numeric":["=",100]}]}`, `{"p":101}`, false, docLambda},
		{"numeric on a string does not match", `{"p":[{"numeric":["=",100]}]}`, `{"p":"100"}`, false, docContent},
		{"numeric on a bool does not match", `{"p":[{"numeric":[">",0]}]}`, `{"p":true}`, false, docContent},
		{"numeric missing field", `{"p":[{"numeric":[">",0]}]}`, `{}`, false, docContent},
		{"event value past 5.0e9 does not match", `{"p":[{"numeric":[">",0]}]}`, `{"p":6e9}`, false, docContent},
		{"event value at 5.0e9 matches", `{"p":[{"numeric":[">",0]}]}`, `{"p":5e9}`, true, docContent},
		{"six decimal places: 0.000001 > 0", `{"p":[{"numeric":[">",0]}]}`, `{"p":0.000001}`, true, docContent},
		{"six decimal places: 0.0000001 is 0", `{"p":[{"numeric":[">",0]}]}`, `{"p":0.0000001}`, false, docContent},
		{"six decimal places: equal far past the sixth", `{"p":[{"numeric":["=",1.5]}]}`, `{"p":1.50000000001}`, true, docContent},
		{"numeric on an array element", `{"p":[{"numeric":[">",10]}]}`, `{"p":[1,20]}`, true, docArrays},
		{"numeric or exact", `{"p":[{"numeric":[">",10]},"none"]}`, `{"p":"none"}`, true, docPattern},
	})
}

func TestPatternCIDR(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"IPv4 inside", `{"ip":[{"cidr":"10.0.0.0/24"}]}`, `{"ip":"10.0.0.33"}`, true, docContent},
		{"IPv4 outside", `{"ip":[{"cidr":"10.0.0.0/24"}]}`, `{"ip":"10.0.1.1"}`, false, docContent},
		{"IPv4 /8", `{"ip":[{"cidr":"10.0.0.0/8"}]}`, `{"ip":"10.200.3.4"}`, true, docRuler},
		{"IPv6 inside", `{"ip":[{"cidr":"2001:db8::/32"}]}`, `{"ip":"2001:db8:1::7"}`, true, docContent},
		{"IPv6 outside", `{"ip":[{"cidr":"2001:db8::/32"}]}`, `{"ip":"2001:db9::1"}`, false, docContent},
		{"IPv6 address against IPv4 block", `{"ip":[{"cidr":"10.0.0.0/8"}]}`, `{"ip":"2001:db8::1"}`, false, docContent},
		{"not an address", `{"ip":[{"cidr":"10.0.0.0/8"}]}`, `{"ip":"ten"}`, false, docContent},
		{"a number is not an address", `{"ip":[{"cidr":"10.0.0.0/8"}]}`, `{"ip":10}`, false, docContent},
	})
}

func TestPatternWildcard(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"middle", `{"s":[{"wildcard":"Simple*Service"}]}`, `{"s":"SimpleQueueService"}`, true, docRuler},
		{"empty run", `{"s":[{"wildcard":"Simple*Service"}]}`, `{"s":"SimpleService"}`, true, docRuler},
		{"miss", `{"s":[{"wildcard":"Simple*Service"}]}`, `{"s":"SimpleServices"}`, false, docRuler},
		{"both ends", `{"f":[{"wildcard":"*/lib/*"}]}`, `{"f":"/usr/lib/libc.so"}`, true, docContent},
		{"both ends miss", `{"f":[{"wildcard":"*/lib/*"}]}`, `{"f":"/usr/bin/ls"}`, false, docContent},
		{"several", `{"f":[{"wildcard":"a*b*c"}]}`, `{"f":"axxbyybzc"}`, true, docRuler},
		{"overlap needs order", `{"f":[{"wildcard":"a*b*c"}]}`, `{"f":"acb"}`, false, docRuler},
		{"no wildcard is exact", `{"f":[{"wildcard":"abc"}]}`, `{"f":"abcd"}`, false, docRuler},
		{"escaped asterisk is literal", `{"f":[{"wildcard":"a\\*b"}]}`, `{"f":"a*b"}`, true, docRuler},
		{"escaped asterisk is not a wildcard", `{"f":[{"wildcard":"a\\*b"}]}`, `{"f":"axb"}`, false, docRuler},
		{"escaped backslash", `{"f":[{"wildcard":"a\\\\*"}]}`, `{"f":"a\\xyz"}`, true, docRuler},
		{"strings only", `{"f":[{"wildcard":"1*"}]}`, `{"f":12}`, false, docRuler},
	})
}

func TestPatternAnythingBut(t *testing.T) {
	t.Parallel()
	runPatternCases(t, EventBridgeRule, []patternCase{
		{"scalar", `{"a":[{"anything-but":"x"}]}`, `{"a":"y"}`, true, docContent},
		{"scalar hit", `{"a":[{"anything-but":"x"}]}`, `{"a":"x"}`, false, docContent},
		{"list", `{"a":[{"anything-but":["x","y"]}]}`, `{"a":"y"}`, false, docContent},
		{"list pass", `{"a":[{"anything-but":["x","y"]}]}`, `{"a":"z"}`, true, docContent},
		{"missing field", `{"a":[{"anything-but":["x"]}]}`, `{}`, false, docContent},
		{"number", `{"a":[{"anything-but":123}]}`, `{"a":124}`, true, docContent},
		{"number hit", `{"a":[{"anything-but":123}]}`, `{"a":123}`, false, docContent},
		{"number list hit, other text", `{"a":[{"anything-but":[100,200]}]}`, `{"a":1.0e2}`, false, docSNS},
		{"number list pass", `{"a":[{"anything-but":[100,200]}]}`, `{"a":100.1}`, true, docSNS},
		{"number list on a string value", `{"a":[{"anything-but":[100]}]}`, `{"a":"x"}`, true, docRulerCode},
		{"number list on the number's text", `{"a":[{"anything-but":[100]}]}`, `{"a":"100"}`, true, docRulerCode},
		{"string list on a number value", `{"a":[{"anything-but":["x"]}]}`, `{"a":1}`, true, docRulerCode},
		{"string list on the string's number", `{"a":[{"anything-but":["1"]}]}`, `{"a":1}`, true, docRulerCode},
		{"prefix", `{"a":[{"anything-but":{"prefix":"aws."}}]}`, `{"a":"aws.events"}`, false, docContent},
		{"prefix pass", `{"a":[{"anything-but":{"prefix":"aws."}}]}`, `{"a":"com.shop"}`, true, docContent},
		{"prefix list", `{"a":[{"anything-but":{"prefix":["us-","eu-"]}}]}`, `{"a":"eu-west-1"}`, false, docRuler},
		{"prefix list pass", `{"a":[{"anything-but":{"prefix":["us-","eu-"]}}]}`, `{"a":"ap-south-1"}`, true, docRuler},
		{"suffix", `{"f":[{"anything-but":{"suffix":".png"}}]}`, `{"f":"a.png"}`, false, docContent},
		{"suffix pass", `{"f":[{"anything-but":{"suffix":".png"}}]}`, `{"f":"a.jpg"}`, true, docContent},
		{"suffix list", `{"f":[{"anything-but":{"suffix":[".png",".jpg"]}}]}`, `{"f":"a.jpg"}`, false, docRuler},
		{"equals-ignore-case", `{"s":[{"anything-but":{"equals-ignore-case":"initializing"}}]}`, `{"s":"INITIALIZING"}`, false, docContent},
		{"equals-ignore-case pass", `{"s":[{"anything-but":{"equals-ignore-case":"initializing"}}]}`, `{"s":"running"}`, true, docContent},
		{"equals-ignore-case list", `{"s":[{"anything-but":{"equals-ignore-case":["Stopped","OverLoaded"]}}]}`, `{"s":"overloaded"}`, false, docRuler},
		{"wildcard", `{"p":[{"anything-but":{"wildcard":"*/lib/*"}}]}`, `{"p":"/usr/lib/x"}`, false, docContent},
		{"wildcard pass", `{"p":[{"anything-but":{"wildcard":"*/lib/*"}}]}`, `{"p":"/usr/bin/x"}`, true, docContent},
		{"wildcard list", `{"p":[{"anything-but":{"wildcard":["*/lib/*","*/bin/*"]}}]}`, `{"p":"/usr/bin/x"}`, false, docRuler},
		{"prefix on a number value", `{"a":[{"anything-but":{"prefix":"1"}}]}`, `{"a":2}`, true, recorded},
	})
}

// TestPatternNullNumberMissing pins, for every operator, what it answers for
// a null, a number, a boolean, an absent field, an empty array and an object
// value. The rule (Event Ruler, the engine EventBridge runs): string
// operators — prefix, suffix, equals-ignore-case, wildcard, cidr and the
// string forms of anything-but — see string values only, so anything-but in
// those forms matches every present non-string leaf (null, numbers, true,
// false); numeric operators and numeric anything-but see numbers within
// ±5.0e9 only, so numeric anything-but matches every other present leaf;
// nothing but exists:false matches a field that has no leaf (absent, [] or
// an object). "recorded" rows are LocalStack's event pattern templates
// validated against AWS's TestEventPattern (content_anything_*_null,
// content_anything_prefix_int_value, content_anything_prefix_list_int,
// content_anything_wildcard_int, content_anything_*_missing_NEG,
// arrays_empty_null_NEG, number_comparison_float) and its rule-to-SQS test
// of anything-but on a null detail field.
func TestPatternNullNumberMissing(t *testing.T) {
	t.Parallel()
	type row struct {
		op                                   string
		pattern                              string
		null, number, boolean, missing, empt bool
		object                               bool
		aws                                  string
	}
	const (
		recordedNull       = recorded + " for null (absent: recorded _missing_NEG); " + docRulerCode + " for the rest"
		recordedNullNumber = recorded + " for null and a number (absent: recorded _missing_NEG); " + docRulerCode + " for the rest"
	)
	rows := []row{
		{"exact string", `["x"]`, false, false, false, false, false, false, docPattern},
		{"exact number", `[12]`, false, true, false, false, false, false, docPattern},
		{"exact null", `[null]`, true, false, false, false, false, false, recorded + " (null_value, arrays_empty_null_NEG)"},
		{"exact true", `[true]`, false, false, true, false, false, false, docPattern},
		{"exists true", `[{"exists":true}]`, true, true, true, false, false, false, docRuler + "; [] recorded"},
		{"exists false", `[{"exists":false}]`, false, false, false, true, true, true, docContent + "; absent parent recorded"},
		{"prefix", `[{"prefix":"1"}]`, false, false, false, false, false, false, docContent},
		{"suffix", `[{"suffix":"2"}]`, false, false, false, false, false, false, docContent},
		{"equals-ignore-case", `[{"equals-ignore-case":"12"}]`, false, false, false, false, false, false, docContent},
		{"wildcard", `[{"wildcard":"*"}]`, false, false, false, false, false, false, docRuler},
		{"cidr", `[{"cidr":"10.0.0.0/8"}]`, false, false, false, false, false, false, docContent},
		{"numeric", `[{"numeric":[">",0]}]`, false, true, false, false, false, false, docContent},
		{"anything-but string", `[{"anything-but":"x"}]`, true, true, true, false, false, false, recordedNull},
		{"anything-but string list", `[{"anything-but":["x","y"]}]`, true, true, true, false, false, false, recordedNull},
		{"anything-but number", `[{"anything-but":0}]`, true, true, true, false, false, false, docRulerCode},
		{"anything-but number, excluded", `[{"anything-but":12}]`, true, false, true, false, false, false, docContent},
		{"anything-but number list", `[{"anything-but":[100,200]}]`, true, true, true, false, false, false, docRulerCode},
		{"anything-but prefix", `[{"anything-but":{"prefix":"1"}}]`, true, true, true, false, false, false, recordedNullNumber},
		{"anything-but prefix list", `[{"anything-but":{"prefix":["1","x"]}}]`, true, true, true, false, false, false, recordedNullNumber},
		{"anything-but suffix", `[{"anything-but":{"suffix":"2"}}]`, true, true, true, false, false, false, recordedNull},
		{"anything-but suffix list", `[{"anything-but":{"suffix":["2","x"]}}]`, true, true, true, false, false, false, recordedNull},
		{"anything-but equals-ignore-case", `[{"anything-but":{"equals-ignore-case":"12"}}]`, true, true, true, false, false, false, recordedNull},
		{"anything-but wildcard", `[{"anything-but":{"wildcard":"*"}}]`, true, true, true, false, false, false, recordedNullNumber},
		{"anything-but wildcard list", `[{"anything-but":{"wildcard":["1*","x*"]}}]`, true, true, true, false, false, false, recordedNull},
	}
	events := []struct {
		name, event string
		want        func(row) bool
	}{
		{"null", `{"a":null}`, func(r row) bool { return r.null }},
		{"number 12", `{"a":12}`, func(r row) bool { return r.number }},
		{"true", `{"a":true}`, func(r row) bool { return r.boolean }},
		{"absent", `{"b":"x"}`, func(r row) bool { return r.missing }},
		{"empty array", `{"a":[]}`, func(r row) bool { return r.empt }},
		{"object", `{"a":{"k":"x"}}`, func(r row) bool { return r.object }},
	}
	var cases []patternCase
	for _, r := range rows {
		for _, e := range events {
			cases = append(cases, patternCase{name: r.op + " on " + e.name, pattern: `{"a":` + r.pattern + `}`, event: e.event, want: e.want(r), aws: r.aws})
		}
	}
	runPatternCases(t, EventBridgeRule, cases)
	// The Lambda dialect shares the matcher: its operators answer the same.
	var lambda []patternCase
	for _, c := range cases {
		if _, err := CompilePatternFor(c.pattern, LambdaFilter); err == nil {
			lambda = append(lambda, c)
		}
	}
	t.Run("lambda", func(t *testing.T) { runPatternCases(t, LambdaFilter, lambda) })
}

func TestPatternMatchGoValues(t *testing.T) {
	t.Parallel()
	p := MustCompilePattern(`{"n":[{"numeric":[">",1]}],"tags":["b"],"m":{"k":["v"]}}`)
	tests := []struct {
		name  string
		event map[string]any
		want  bool
	}{
		{"json-decoded shapes", map[string]any{"n": 2.0, "tags": []any{"a", "b"}, "m": map[string]any{"k": "v"}}, true},
		{"typed Go slices and maps are matched as their JSON", map[string]any{"n": 2, "tags": []string{"a", "b"}, "m": map[string]string{"k": "v"}}, true},
		{"typed Go slice without the value", map[string]any{"n": 2, "tags": []string{"a"}, "m": map[string]string{"k": "v"}}, false},
		{"nil event", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := p.Match(tc.event); got != tc.want {
				t.Fatalf("Match(%v) = %v, want %v", tc.event, got, tc.want)
			}
		})
	}
}

func TestCompilePatternRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		names   string // what the error must name
	}{
		{`[]`, "object"},
		{`{}`, "empty object"},
		{`{"a":[]}`, "empty array"},
		{`{"a":"x"}`, "object or an array"},
		{`{"a":[{"exists":"yes"}]}`, "exists"},
		{`{"a":[{"prefix":1}]}`, "prefix"},
		{`{"a":[{"prefix":""}]}`, "prefix"},
		{`{"a":[{"suffix":""}]}`, "suffix"},
		{`{"a":[{"prefix":{"equals-ignore-case":1}}]}`, "prefix"},
		{`{"a":[{"prefix":"x","suffix":"y"}]}`, "exactly one key"},
		{`{"$or":[{"a":["x"]}]}`, "$or"},
		{`{"$or":{"a":["x"]}}`, "$or"},
		{`{"$or":[{"a":["x"]},"b"]}`, "$or"},
		{`{"a":[[1]]}`, "unsupported value"},
		{`not json`, "invalid"},
		{`{"a":[{"contains":"x"}]}`, "contains"},
		{`{"a":[{"numeric":[">","1"]}]}`, "numeric"},
		{`{"a":[{"numeric":[">",1,"<"]}]}`, "numeric"},
		{`{"a":[{"numeric":["!=",1]}]}`, "numeric"},
		{`{"a":[{"numeric":["=",1,"<",2]}]}`, "numeric"},
		{`{"a":[{"numeric":["<",5,">",1]}]}`, "numeric"},
		{`{"a":[{"numeric":[">",5,"<",1]}]}`, "numeric"},
		{`{"a":[{"numeric":[">",5,"<",5]}]}`, "numeric"},
		{`{"a":[{"numeric":[">",1,">",2]}]}`, "numeric"},
		{`{"a":[{"numeric":[">",6e9]}]}`, "numeric"},
		{`{"a":[{"numeric":["<",-5000000001]}]}`, "numeric"},
		{`{"a":[{"numeric":[]}]}`, "numeric"},
		{`{"a":[{"cidr":"10.0.0.1"}]}`, "cidr"},
		{`{"a":[{"cidr":"10.0.0.0/33"}]}`, "cidr"},
		{`{"a":[{"cidr":"nope/8"}]}`, "cidr"},
		{`{"a":[{"cidr":1}]}`, "cidr"},
		{`{"a":[{"wildcard":"a**b"}]}`, "wildcard"},
		{`{"a":[{"wildcard":"a\\xb"}]}`, "wildcard"},
		{`{"a":[{"wildcard":"ab\\"}]}`, "wildcard"},
		{`{"a":[{"wildcard":1}]}`, "wildcard"},
		{`{"a":[{"anything-but":[]}]}`, "anything-but"},
		{`{"a":[{"anything-but":["x",1]}]}`, "anything-but"},
		{`{"a":[{"anything-but":true}]}`, "anything-but"},
		{`{"a":[{"anything-but":null}]}`, "anything-but"},
		{`{"a":[{"anything-but":[true]}]}`, "anything-but"},
		{`{"a":[{"anything-but":[6e9]}]}`, "anything-but"},
		{`{"a":[{"anything-but":{"prefix":["a",""]}}]}`, "anything-but"},
		{`{"a":[{"anything-but":{"prefix":[]}}]}`, "anything-but"},
		{`{"a":[{"anything-but":{"prefix":"a","suffix":"b"}}]}`, "anything-but"},
		{`{"a":[{"anything-but":{"exists":true}}]}`, "anything-but"},
		{`{"a":[{"anything-but":{"wildcard":"a**"}}]}`, "anything-but wildcard"},
		{`{"a":[{"anything-but":{"prefix":{"equals-ignore-case":"x"}}}]}`, "anything-but"},
		{`{"a":{"b":["x"]},"a.b":["y"]}`, "given twice"},
		{`{"a":["x"],"$or":[{"a":["y"]},{"b":["z"]}]}`, "given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.pattern, func(t *testing.T) {
			t.Parallel()
			_, err := CompilePattern(tc.pattern)
			if !errors.Is(err, ErrInvalidPattern) {
				t.Fatalf("CompilePattern(%s) error = %v, want ErrInvalidPattern", tc.pattern, err)
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("CompilePattern(%s) error %q does not name %q", tc.pattern, err, tc.names)
			}
		})
	}
}

// sizedPattern returns a pattern of exactly n characters.
func sizedPattern(t *testing.T, n int) string {
	t.Helper()
	p := `{"a":[""]}`
	pad := n - len(p)
	if pad < 0 {
		t.Fatalf("n %d too small", n)
	}
	return `{"a":["` + strings.Repeat("x", pad) + `"]}`
}

func TestCompilePatternSizeLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
		d    PatternDialect
		ok   bool
	}{
		{"EventBridge at 2048 (eb-quota Event pattern size)", MaxEventBridgePatternChars, EventBridgeRule, true},
		{"EventBridge past 2048", MaxEventBridgePatternChars + 1, EventBridgeRule, false},
		{"Lambda past 2048", MaxEventBridgePatternChars + 1, LambdaFilter, true},
		{"Lambda at 4096 (API_Filter Pattern)", MaxLambdaFilterPatternChars, LambdaFilter, true},
		{"Lambda past 4096", MaxLambdaFilterPatternChars + 1, LambdaFilter, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := sizedPattern(t, tc.size)
			if len(p) != tc.size {
				t.Fatalf("pattern is %d characters, want %d", len(p), tc.size)
			}
			_, err := CompilePatternFor(p, tc.d)
			if tc.ok && err != nil {
				t.Fatalf("error = %v, want accepted", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidPattern) {
				t.Fatalf("error = %v, want ErrInvalidPattern", err)
			}
		})
	}
	// A Go value is measured as the JSON AWS would receive: ">" is one
	// character, not "\u003e".
	v := map[string]any{"a": []any{map[string]any{"numeric": []any{">", 0}}}, "b": []any{strings.Repeat("x", MaxEventBridgePatternChars-48)}}
	if _, err := CompilePattern(v); err != nil {
		t.Fatalf("Go value under the limit refused: %v", err)
	}
}

func TestCompilePatternForLambdaFilter(t *testing.T) {
	t.Parallel()
	accepted := []string{
		`{"UserID":[null]}`,
		`{"LastName":[""]}`,
		`{"Name":["Alice"]}`,
		`{"Name":[{"equals-ignore-case":"alice"}]}`,
		`{"PaymentType":["Credit","Debit"]}`,
		`{"$or":[{"Location":["New York"]},{"Day":["Monday"]}]}`,
		`{"Weather":[{"anything-but":["Raining"]}]}`,
		`{"Price":[{"numeric":["=",100]}]}`,
		`{"Price":[{"numeric":[">",10,"<=",20]}]}`,
		`{"ProductName":[{"exists":true}]}`,
		`{"ProductName":[{"exists":false}]}`,
		`{"Region":[{"prefix":"us-"}]}`,
		`{"FileName":[{"suffix":".png"}]}`,
	}
	for _, p := range accepted {
		if _, err := CompilePatternFor(p, LambdaFilter); err != nil {
			t.Errorf("CompilePatternFor(%s, LambdaFilter) = %v, want accepted (%s Filter rule syntax)", p, err, docLambda)
		}
	}
	refused := map[string]string{
		`{"ip":[{"cidr":"10.0.0.0/24"}]}`:                     "cidr",
		`{"f":[{"wildcard":"*.png"}]}`:                        "wildcard",
		`{"r":[{"anything-but":{"prefix":"us-"}}]}`:           "anything-but prefix",
		`{"r":[{"anything-but":{"suffix":".png"}}]}`:          "anything-but suffix",
		`{"r":[{"anything-but":{"equals-ignore-case":"x"}}]}`: "anything-but equals-ignore-case",
		`{"r":[{"anything-but":{"wildcard":"x*"}}]}`:          "anything-but wildcard",
		`{"s":[{"prefix":{"equals-ignore-case":"eventb"}}]}`:  "prefix with equals-ignore-case",
		`{"s":[{"suffix":{"equals-ignore-case":".png"}}]}`:    "suffix with equals-ignore-case",
	}
	for p, op := range refused {
		_, err := CompilePatternFor(p, LambdaFilter)
		if !errors.Is(err, ErrInvalidPattern) || !strings.Contains(err.Error(), op) {
			t.Errorf("CompilePatternFor(%s, LambdaFilter) = %v, want ErrInvalidPattern naming %q (not in %s)", p, err, op, docLambda)
		}
		if _, err := CompilePatternFor(p, EventBridgeRule); err != nil {
			t.Errorf("CompilePatternFor(%s, EventBridgeRule) = %v, want accepted (eb-create-pattern-operators)", p, err)
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

// TestStreamFilterDynamoDBNumbers: Lambda accepts numeric on stream filters,
// but DynamoDB stream images carry numbers as strings ({"N":"101"}), so a
// numeric filter on an image attribute never matches; an exact string does
// (the Lambda guide's multi-level filtering example matches "N": ["101"]).
func TestStreamFilterDynamoDBNumbers(t *testing.T) {
	t.Parallel()
	record := lambdaRecordJSON("INSERT", `{"pk":{"S":"Order#1"},"sequence":{"N":"101"}}`, "")
	runPatternCases(t, LambdaFilter, []patternCase{
		{"numeric on an N attribute does not match", `{"dynamodb":{"NewImage":{"sequence":{"N":[{"numeric":[">",100]}]}}}}`, record, false, docLambda},
		{"exact string on an N attribute matches", `{"dynamodb":{"NewImage":{"sequence":{"N":["101"]}}}}`, record, true, docLambda},
		{"numeric on a record number matches", `{"dynamodb":{"SizeBytes":[{"numeric":[">",0]}]}}`, record, true, docLambda},
		{"prefix on an S attribute", `{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"Order#"}]}}}}`, record, true, docLambda},
	})
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
