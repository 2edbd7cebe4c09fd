package mrec

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

func sAttr(v string) *streamtypes.AttributeValueMemberS {
	return &streamtypes.AttributeValueMemberS{Value: v}
}

// TestRecordToWrite maps synthetic stream records (Dynoxide runs no TTL, so
// the TTL delete is only testable here) to the writes that replicate them.
func TestRecordToWrite(t *testing.T) {
	t.Parallel()
	keys := map[string]streamtypes.AttributeValue{"pk": sAttr("k1")}
	image := map[string]streamtypes.AttributeValue{
		"pk":   sAttr("k1"),
		"n":    &streamtypes.AttributeValueMemberN{Value: "42"},
		"tags": &streamtypes.AttributeValueMemberSS{Value: []string{"b", "a"}},
		"m": &streamtypes.AttributeValueMemberM{Value: map[string]streamtypes.AttributeValue{
			"l": &streamtypes.AttributeValueMemberL{Value: []streamtypes.AttributeValue{&streamtypes.AttributeValueMemberBOOL{Value: true}, &streamtypes.AttributeValueMemberNULL{Value: true}}},
			"b": &streamtypes.AttributeValueMemberB{Value: []byte{1, 2}},
		}},
	}
	wantImage := map[string]ddbtypes.AttributeValue{
		"pk":   &ddbtypes.AttributeValueMemberS{Value: "k1"},
		"n":    &ddbtypes.AttributeValueMemberN{Value: "42"},
		"tags": &ddbtypes.AttributeValueMemberSS{Value: []string{"b", "a"}},
		"m": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{
			"l": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{&ddbtypes.AttributeValueMemberBOOL{Value: true}, &ddbtypes.AttributeValueMemberNULL{Value: true}}},
			"b": &ddbtypes.AttributeValueMemberB{Value: []byte{1, 2}},
		}},
	}
	wantKey := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k1"}}
	ttlIdentity := &streamtypes.Identity{Type: aws.String("Service"), PrincipalId: aws.String("dynamodb.amazonaws.com")}
	rec := func(op streamtypes.OperationType, newImage map[string]streamtypes.AttributeValue, id *streamtypes.Identity) streamtypes.Record {
		return streamtypes.Record{EventName: op, UserIdentity: id, Dynamodb: &streamtypes.StreamRecord{
			Keys: keys, NewImage: newImage, OldImage: image, SequenceNumber: aws.String("100"),
		}}
	}
	tests := []struct {
		name    string
		rec     streamtypes.Record
		put     *dynamodb.PutItemInput
		del     *dynamodb.DeleteItemInput
		ttl     bool
		wantErr bool
	}{
		{name: "insert", rec: rec(streamtypes.OperationTypeInsert, image, nil), put: &dynamodb.PutItemInput{TableName: aws.String("t"), Item: wantImage}},
		{name: "modify", rec: rec(streamtypes.OperationTypeModify, image, nil), put: &dynamodb.PutItemInput{TableName: aws.String("t"), Item: wantImage}},
		{name: "remove", rec: rec(streamtypes.OperationTypeRemove, nil, nil), del: &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: wantKey}},
		{name: "ttl delete is a plain delete", rec: rec(streamtypes.OperationTypeRemove, nil, ttlIdentity), del: &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: wantKey}, ttl: true},
		{name: "another service's delete is not TTL", rec: rec(streamtypes.OperationTypeRemove, nil, &streamtypes.Identity{Type: aws.String("Service"), PrincipalId: aws.String("other.amazonaws.com")}), del: &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: wantKey}},
		{name: "keys-only stream", rec: rec(streamtypes.OperationTypeModify, nil, nil), wantErr: true},
		{name: "no keys", rec: streamtypes.Record{EventName: streamtypes.OperationTypeInsert, Dynamodb: &streamtypes.StreamRecord{NewImage: image}}, wantErr: true},
		{name: "unknown event", rec: rec("UPSERT", image, nil), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := recordToWrite("t", tc.rec)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("recordToWrite: no error, want one (write %+v)", w)
				}
				return
			}
			if err != nil {
				t.Fatalf("recordToWrite: %v", err)
			}
			if w.ttl != tc.ttl || w.seq != "100" {
				t.Errorf("ttl=%v seq=%q, want ttl=%v seq 100", w.ttl, w.seq, tc.ttl)
			}
			put, del := writeInputs(w)
			// The whole request is compared: a replicated delete carries no
			// condition, return value or identity, a put no added attribute.
			if !reflect.DeepEqual(put, tc.put) || !reflect.DeepEqual(del, tc.del) {
				t.Errorf("writeInputs = %+v, %+v; want %+v, %+v", put, del, tc.put, tc.del)
			}
			if del != nil && w.hash != absent || put != nil && w.hash != imageHash(wantImage) {
				t.Errorf("hash %d does not match the image", w.hash)
			}
		})
	}
}

func TestImageHash(t *testing.T) {
	t.Parallel()
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	base := map[string]ddbtypes.AttributeValue{"a": s("1"), "set": &ddbtypes.AttributeValueMemberSS{Value: []string{"x", "y"}}}
	tests := []struct {
		name  string
		other map[string]ddbtypes.AttributeValue
		equal bool
	}{
		{"same", map[string]ddbtypes.AttributeValue{"set": &ddbtypes.AttributeValueMemberSS{Value: []string{"x", "y"}}, "a": s("1")}, true},
		{"set order ignored", map[string]ddbtypes.AttributeValue{"a": s("1"), "set": &ddbtypes.AttributeValueMemberSS{Value: []string{"y", "x"}}}, true},
		{"value differs", map[string]ddbtypes.AttributeValue{"a": s("2"), "set": &ddbtypes.AttributeValueMemberSS{Value: []string{"x", "y"}}}, false},
		{"type differs", map[string]ddbtypes.AttributeValue{"a": &ddbtypes.AttributeValueMemberN{Value: "1"}, "set": &ddbtypes.AttributeValueMemberSS{Value: []string{"x", "y"}}}, false},
		{"attribute added", map[string]ddbtypes.AttributeValue{"a": s("1"), "b": s(""), "set": &ddbtypes.AttributeValueMemberSS{Value: []string{"x", "y"}}}, false},
		{"name/value boundary", map[string]ddbtypes.AttributeValue{"a1": s(""), "set": &ddbtypes.AttributeValueMemberSS{Value: []string{"x", "y"}}}, false},
		{"absent", nil, false},
	}
	for _, tc := range tests {
		if got := imageHash(base) == imageHash(tc.other); got != tc.equal {
			t.Errorf("%s: equal=%v, want %v", tc.name, got, tc.equal)
		}
	}
	num := func(vs ...string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"n": &ddbtypes.AttributeValueMemberN{Value: vs[0]}, "ns": &ddbtypes.AttributeValueMemberNS{Value: vs[1:]}}
	}
	for _, c := range []struct {
		a, b  map[string]ddbtypes.AttributeValue
		equal bool
	}{
		{num("1.50", "1", "20"), num("1.5", "2E1", "01.0"), true},
		{num("-0.0001", "12345678901234567890123456789012345678"), num("-1E-4", "12345678901234567890123456789012345678.0"), true},
		{num("1.5", "1"), num("1.6", "1"), false},
		{num("12345678901234567890123456789012345678", "1"), num("12345678901234567890123456789012345677", "1"), false},
	} {
		if got := imageHash(c.a) == imageHash(c.b); got != c.equal {
			t.Errorf("numbers %v vs %v: equal=%v, want %v", c.a, c.b, got, c.equal)
		}
	}
}

func TestVersionNewer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v, o version
		want bool
	}{
		{version{2, "eu-west-1"}, version{1, "us-east-1"}, true},
		{version{1, "us-east-1"}, version{2, "eu-west-1"}, false},
		{version{5, "us-east-1"}, version{5, "eu-west-1"}, true}, // tie: greater Region name wins
		{version{5, "eu-west-1"}, version{5, "us-east-1"}, false},
		{version{5, "eu-west-1"}, version{5, "eu-west-1"}, false}, // the same version does not win
	}
	for _, tc := range tests {
		if got := tc.v.newer(tc.o); got != tc.want {
			t.Errorf("%+v.newer(%+v) = %v, want %v", tc.v, tc.o, got, tc.want)
		}
	}
}

func TestDelayDeterministic(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 7, TailProb: 0.02}
	cfg.setDefaults()
	mk := func(seed int64) *Replicator { c := cfg; c.Seed = seed; return &Replicator{cfg: c} }
	d := newDirection("eu-west-1", "us-east-1")
	draw := func(r *Replicator) []time.Duration {
		var out []time.Duration
		for i := range 2000 {
			w := write{table: "t", keyStr: string(rune('a' + i%26)), hash: uint64(i)}
			out = append(out, r.delay(d, w))
		}
		return out
	}
	a, b, c := draw(mk(7)), draw(mk(7)), draw(mk(8))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed drew different delays")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds drew the same delays")
	}
	tail, below := 0, 0
	for _, x := range a {
		if x >= DefaultTailShortest {
			tail++
		}
		if x < DefaultDelayMedian {
			below++
		}
	}
	// 2% tail: 40 expected of 2000; half the rest below the median.
	if tail < 15 || tail > 70 || below < 850 || below > 1100 {
		t.Errorf("tail %d (want ~40), below median %d (want ~980)", tail, below)
	}
	// drawDelay alone is reproducible from a seeded source.
	r1, r2 := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
	if drawDelay(r1, &cfg) != drawDelay(r2, &cfg) {
		t.Error("drawDelay is not a function of its source")
	}
}

type nopDDB struct{ DynamoDBAPI }
type nopStreams struct{ StreamsAPI }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	reg := func(name string) Region { return Region{Name: name, DDB: nopDDB{}, Streams: nopStreams{}} }
	ok := func() Config {
		return Config{Regions: []Region{reg("eu-west-1"), reg("us-east-1")}, Tables: []string{"t"}}
	}
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"valid", func(*Config) {}, true},
		{"one region", func(c *Config) { c.Regions = c.Regions[:1] }, false},
		{"bad region name", func(c *Config) { c.Regions[1].Name = "US_EAST" }, false},
		{"duplicate region", func(c *Config) { c.Regions[1].Name = "eu-west-1" }, false},
		{"no client", func(c *Config) { c.Regions[0].Streams = nil }, false},
		{"no tables", func(c *Config) { c.Tables = nil }, false},
		{"duplicate table", func(c *Config) { c.Tables = []string{"t", "t"} }, false},
		{"negative sigma", func(c *Config) { c.DelaySigma = -1 }, false},
		{"tail prob", func(c *Config) { c.TailProb = 1.5 }, false},
		{"tail range", func(c *Config) { c.TailMin, c.TailMax = 3*time.Second, time.Second }, false},
		{"starting position", func(c *Config) { c.StartingPosition = "AT_SEQUENCE_NUMBER" }, false},
	}
	for _, tc := range tests {
		c := ok()
		tc.edit(&c)
		c.setDefaults()
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if _, err := Start(context.Background(), Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Start(empty config) = %v, want ErrInvalidConfig", err)
	}
}

// expiringStreams answers ExpiredIteratorException to the GetRecords calls
// numbered in expire (1-based), as DynamoDB does for an iterator older than
// 15 minutes.
type expiringStreams struct {
	StreamsAPI
	calls  chan int
	expire map[int]bool
}

func (e *expiringStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opt ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	n := <-e.calls
	e.calls <- n + 1
	if e.expire[n] {
		return nil, &streamtypes.ExpiredIteratorException{Message: aws.String("Iterator expired")}
	}
	return e.StreamsAPI.GetRecords(ctx, in, opt...)
}
