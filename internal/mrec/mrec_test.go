package mrec

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

const regA, regB = "eu-west-1", "us-east-1"

// pair is two Dynoxide servers ("Regions") with the same table and a
// replicator between them.
type pair struct {
	a, b   *ddbtest.Env
	table  string
	table2 string // a second replicated table (the transaction test)
	rep    *Replicator
}

// newPair starts two Dynoxide servers, creates the two tables (pk string,
// stream NEW_AND_OLD_IMAGES, then NEW_IMAGE) in each and starts a replicator with cfg (Regions and
// Tables filled in; wrap, when set, wraps each Region's Streams client).
func newPair(t *testing.T, cfg Config, wrap func(region string, s StreamsAPI) StreamsAPI) *pair {
	t.Helper()
	p := newServers(t)
	p.start(t, cfg, wrap)
	return p
}

// newServers is newPair without the replicator.
func newServers(t *testing.T) *pair {
	t.Helper()
	p := &pair{a: ddbtest.New(t), b: ddbtest.New(t), table: ddbtest.Name("mrec"), table2: ddbtest.Name("mrec2")}
	for _, env := range []*ddbtest.Env{p.a, p.b} {
		for table, view := range map[string]ddbtypes.StreamViewType{p.table: ddbtypes.StreamViewTypeNewAndOldImages, p.table2: ddbtypes.StreamViewTypeNewImage} {
			in := ddbtest.SimpleTableInput(table)
			in.StreamSpecification = &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: view}
			env.CreateTable(t, in)
		}
	}
	return p
}

// start starts the replicator of newPair.
func (p *pair) start(t *testing.T, cfg Config, wrap func(region string, s StreamsAPI) StreamsAPI) {
	t.Helper()
	var sa, sb StreamsAPI = p.a.Streams, p.b.Streams
	if wrap != nil {
		sa, sb = wrap(regA, sa), wrap(regB, sb)
	}
	cfg.Regions = []Region{{Name: regA, DDB: p.a.DDB, Streams: sa}, {Name: regB, DDB: p.b.DDB, Streams: sb}}
	cfg.Tables = []string{p.table, p.table2}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rep, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	p.rep = rep
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func (p *pair) env(region string) *ddbtest.Env {
	if region == regA {
		return p.a
	}
	return p.b
}

func (p *pair) put(t *testing.T, region string, item map[string]any) {
	t.Helper()
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.env(region).DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(p.table), Item: av}); err != nil {
		t.Fatalf("put in %s: %v", region, err)
	}
}

func (p *pair) del(t *testing.T, region, pk string) {
	t.Helper()
	if _, err := p.env(region).DDB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(p.table), Key: pkKey(pk)}); err != nil {
		t.Fatalf("delete in %s: %v", region, err)
	}
}

func pkKey(pk string) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}}
}

// get returns the item pk in region (nil when absent).
func (p *pair) get(t *testing.T, region, pk string) map[string]any {
	t.Helper()
	out, err := p.env(region).DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(p.table), Key: pkKey(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("get in %s: %v", region, err)
	}
	if out.Item == nil {
		return nil
	}
	var m map[string]any
	if err := attributevalue.UnmarshalMap(out.Item, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (p *pair) settle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.rep.Settle(ctx); err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

// waitStats polls Stats until ok or 10 s.
func (p *pair) waitStats(t *testing.T, what string, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(p.rep.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, p.rep.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReplicatesBothWaysWithoutLoops(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 1}, nil)
	k1 := map[string]any{"pk": "k1", "n": 1.0, "m": map[string]any{"l": []any{"x", true}}}
	k2 := map[string]any{"pk": "k2", "s": "two"}
	p.put(t, regA, k1)
	p.put(t, regB, k2)
	p.settle(t)
	for _, c := range []struct {
		region, pk string
		want       map[string]any
	}{{regB, "k1", k1}, {regA, "k2", k2}} {
		// Equal items: no attribute added by replication.
		if got := p.get(t, c.region, c.pk); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s in %s = %v, want %v", c.pk, c.region, got, c.want)
		}
	}
	k1["n"] = 2.0
	p.put(t, regA, k1)
	p.del(t, regB, "k2")
	p.settle(t)
	if got := p.get(t, regB, "k1"); !reflect.DeepEqual(got, k1) {
		t.Errorf("k1 in B after update = %v, want %v", got, k1)
	}
	if got := p.get(t, regA, "k2"); got != nil {
		t.Errorf("k2 in A after delete = %v, want none", got)
	}
	// Give a loop time to show, then check every write crossed once.
	time.Sleep(300 * time.Millisecond)
	p.settle(t)
	s := p.rep.Stats()
	ab, ba := s.Direction(regA, regB), s.Direction(regB, regA)
	if ab.Replicated != 2 || ab.DeletesReplicated != 0 || ba.Replicated != 1 || ba.DeletesReplicated != 1 {
		t.Errorf("A->B %+v, B->A %+v: want 2 puts A->B, 1 put and 1 delete B->A", ab, ba)
	}
	for _, r := range []string{regA, regB} {
		if rs := s.Region(r); rs.LocalWrites != 2 || rs.EchoesSkipped != 2 {
			t.Errorf("Region %s: %+v, want 2 local writes and 2 echoes skipped", r, rs)
		}
	}
}

func TestTransactionItemsArriveApartAndReorder(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 3, DelayMedian: 10 * time.Millisecond, TailProb: 0.3, TailMin: 400 * time.Millisecond, TailMax: 500 * time.Millisecond}, nil)
	const n = 10
	var items []ddbtypes.TransactWriteItem
	tables := []string{p.table, p.table2}
	for i := range n {
		items = append(items, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String(tables[i%2]), Item: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("tx-%d", i)},
		}}})
	}
	if _, err := p.a.DDB.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: items}); err != nil {
		t.Fatal(err)
	}
	partial := false
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := 0
		for _, table := range tables {
			out, err := p.b.DDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			got += len(out.Items)
		}
		if got > 0 && got < n {
			partial = true
		}
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.settle(t)
	if !partial {
		t.Error("B never held part of the transaction: its items arrived together")
	}
	if s := p.rep.Stats().Direction(regA, regB); s.Replicated != n || s.Reordered == 0 {
		t.Errorf("A->B %+v: want %d replicated, some reordered", s, n)
	}
}

func TestSameKeyInOrderAndCoalesced(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 5, DelayMedian: 150 * time.Millisecond, DelaySigma: 0.1}, nil)
	const n = 30
	var seen []float64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if it := p.get(t, regB, "hot"); it != nil {
				if v := it["v"].(float64); len(seen) == 0 || seen[len(seen)-1] != v {
					seen = append(seen, v)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	for i := 1; i <= n; i++ {
		p.put(t, regA, map[string]any{"pk": "hot", "v": float64(i)})
	}
	p.settle(t)
	close(stop)
	wg.Wait()
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Errorf("B saw versions out of write order: %v", seen)
			break
		}
	}
	if got := p.get(t, regB, "hot"); got["v"] != float64(n) {
		t.Errorf("B holds %v, want v=%d", got, n)
	}
	s := p.rep.Stats().Direction(regA, regB)
	if s.Coalesced == 0 || s.Replicated+s.Coalesced != n {
		t.Errorf("A->B %+v: want coalesced writes, replicated+coalesced = %d", s, n)
	}
}

func TestLastWriterWins(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 7}, nil)
	for _, d := range [][2]string{{regA, regB}, {regB, regA}} {
		if err := p.rep.Pause(d[0], d[1]); err != nil {
			t.Fatal(err)
		}
	}
	p.put(t, regA, map[string]any{"pk": "k", "v": "a"})
	p.waitStats(t, "A's write read", func(s Stats) bool { return s.Region(regA).LocalWrites == 1 })
	p.put(t, regB, map[string]any{"pk": "k", "v": "b"})
	p.waitStats(t, "B's write read", func(s Stats) bool { return s.Region(regB).LocalWrites == 1 })
	if s := p.rep.Stats(); s.Held != 2 {
		t.Errorf("Held = %d, want 2", s.Held)
	}
	for _, d := range [][2]string{{regA, regB}, {regB, regA}} {
		if err := p.rep.Resume(d[0], d[1]); err != nil {
			t.Fatal(err)
		}
	}
	p.settle(t)
	for _, r := range []string{regA, regB} {
		if got := p.get(t, r, "k"); got["v"] != "b" {
			t.Errorf("%s holds %v, want the later write v=b", r, got)
		}
	}
	s := p.rep.Stats()
	if ab := s.Direction(regA, regB); ab.SuppressedByLWW != 1 || ab.Replicated != 0 {
		t.Errorf("A->B %+v: want the older write suppressed", ab)
	}
	if ba := s.Direction(regB, regA); ba.Replicated != 1 {
		t.Errorf("B->A %+v: want the newer write replicated", ba)
	}
	if err := p.rep.Pause(regA, "mars-north-1"); err == nil {
		t.Error("Pause to an unknown Region: no error")
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 9}, nil)
	if err := p.rep.Pause(regA, regB); err != nil {
		t.Fatal(err)
	}
	p.put(t, regA, map[string]any{"pk": "a1"})
	p.put(t, regB, map[string]any{"pk": "b1"})
	p.settle(t) // held writes are not waited for
	if p.get(t, regB, "a1") != nil {
		t.Error("a1 reached B while A->B is paused")
	}
	if p.get(t, regA, "b1") == nil {
		t.Error("b1 did not reach A: only A->B is paused")
	}
	if s := p.rep.Stats(); s.Direction(regA, regB).Held != 1 || s.Held != 1 {
		t.Errorf("stats %+v: want 1 held A->B", s)
	}
	if err := p.rep.Resume(regA, regB); err != nil {
		t.Fatal(err)
	}
	p.settle(t)
	if p.get(t, regB, "a1") == nil {
		t.Error("a1 not delivered after Resume")
	}
	if s := p.rep.Stats(); s.Held != 0 || s.Replicated != 2 {
		t.Errorf("stats %+v: want nothing held, 2 replicated", s)
	}
}

func TestLoseRecover(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 11}, nil)
	if err := p.rep.Lose(regA); err != nil {
		t.Fatal(err)
	}
	p.put(t, regA, map[string]any{"pk": "a1"})
	p.put(t, regB, map[string]any{"pk": "b1"})
	p.del(t, regB, "b1")
	p.put(t, regB, map[string]any{"pk": "b2"})
	p.waitStats(t, "the writes read", func(s Stats) bool { return s.Region(regA).LocalWrites == 1 && s.Region(regB).LocalWrites == 3 })
	p.settle(t)
	if p.get(t, regB, "a1") != nil || p.get(t, regA, "b2") != nil {
		t.Error("a write crossed while A is lost")
	}
	if s := p.rep.Stats(); s.Direction(regA, regB).Held != 1 || s.Direction(regB, regA).Held != 2 {
		t.Errorf("stats %+v: want 1 held A->B, 2 held B->A (b1 coalesced into its delete)", s)
	}
	if err := p.rep.Recover(regA); err != nil {
		t.Fatal(err)
	}
	p.settle(t)
	if p.get(t, regB, "a1") == nil || p.get(t, regA, "b2") == nil || p.get(t, regA, "b1") != nil {
		t.Error("held writes not delivered after Recover")
	}
}

func TestSettleUnderContinuousWrites(t *testing.T) {
	t.Parallel()
	p := newPair(t, Config{Seed: 13}, nil)
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.put(t, regA, map[string]any{"pk": "c-" + strconv.FormatInt(i, 10)})
			written.Store(i)
		}
	})
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond)
	for range 3 {
		before := written.Load()
		start := time.Now()
		p.settle(t)
		t.Logf("Settle took %s under continuous writes", time.Since(start))
		if p.get(t, regB, "c-"+strconv.FormatInt(before, 10)) == nil {
			t.Fatalf("c-%d, written before Settle, is not in B", before)
		}
	}
}

func TestExpiredIteratorRecovered(t *testing.T) {
	t.Parallel()
	var fake *expiringStreams
	p := newPair(t, Config{Seed: 15}, func(region string, s StreamsAPI) StreamsAPI {
		if region != regA {
			return s
		}
		fake = &expiringStreams{StreamsAPI: s, calls: make(chan int, 1), expire: map[int]bool{3: true, 4: true, 10: true}}
		fake.calls <- 1
		return fake
	})
	for i := range 5 {
		p.put(t, regA, map[string]any{"pk": fmt.Sprintf("e-%d", i)})
		time.Sleep(20 * time.Millisecond)
	}
	p.settle(t)
	for i := range 5 {
		if p.get(t, regB, fmt.Sprintf("e-%d", i)) == nil {
			t.Errorf("e-%d not replicated", i)
		}
	}
	s := p.rep.Stats()
	if s.Region(regA).ExpiredIterators < 3 || s.Direction(regA, regB).Replicated != 5 {
		t.Errorf("stats %+v: want 3 expired iterators survived, 5 replicated once", s)
	}
}

// gatedStreams holds every GetRecords call while closed is set, as a slow
// stream reader would be (a call started after a write still returns it).
type gatedStreams struct {
	StreamsAPI
	closed atomic.Bool
}

func (g *gatedStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opt ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	for g.closed.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return g.StreamsAPI.GetRecords(ctx, in, opt...)
}

// TestUnreadLocalWriteNotOverwritten: a local write in B not yet read from
// B's stream must not be overwritten by a replicated write; once read, it is
// the later write (read-time timestamps) and wins in both Regions.
func TestUnreadLocalWriteNotOverwritten(t *testing.T) {
	t.Parallel()
	var gate *gatedStreams
	p := newPair(t, Config{Seed: 19}, func(region string, s StreamsAPI) StreamsAPI {
		if region != regB {
			return s
		}
		gate = &gatedStreams{StreamsAPI: s}
		return gate
	})
	gate.closed.Store(true)
	p.put(t, regB, map[string]any{"pk": "k", "v": "b"})
	p.put(t, regA, map[string]any{"pk": "k", "v": "a"})
	p.waitStats(t, "the replicated write deferred", func(s Stats) bool { return s.Direction(regA, regB).Deferred > 0 })
	if got := p.get(t, regB, "k"); got["v"] != "b" {
		t.Fatalf("B's unread local write was overwritten: %v", got)
	}
	gate.closed.Store(false)
	p.settle(t)
	for _, r := range []string{regA, regB} {
		if got := p.get(t, r, "k"); got["v"] != "b" {
			t.Errorf("%s holds %v, want v=b (B's write, read last)", r, got)
		}
	}
	if s := p.rep.Stats(); s.Direction(regA, regB).SuppressedByLWW != 1 || s.Direction(regB, regA).Replicated != 1 {
		t.Errorf("stats %+v: want A's write suppressed in B, B's replicated to A", s)
	}
}

// TestThroughput measures the replication rate: writes are made in A while
// A->B is paused, then released at once. No wall-clock assertion.
func TestThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("throughput measurement")
	}
	p := newPair(t, Config{Seed: 17}, nil)
	if err := p.rep.Pause(regA, regB); err != nil {
		t.Fatal(err)
	}
	const n, writers = 3000, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				p.put(t, regA, map[string]any{"pk": fmt.Sprintf("t-%d", i), "payload": "0123456789abcdef0123456789abcdef"})
			}
		})
	}
	wg.Wait()
	p.waitStats(t, "the writes read", func(s Stats) bool { return s.Region(regA).LocalWrites == n })
	start := time.Now()
	if err := p.rep.Resume(regA, regB); err != nil {
		t.Fatal(err)
	}
	p.settle(t)
	el := time.Since(start)
	if s := p.rep.Stats().Direction(regA, regB); s.Replicated != n {
		t.Fatalf("replicated %d, want %d", s.Replicated, n)
	}
	t.Logf("replicated %d writes in %s: %.0f writes/s", n, el, float64(n)/el.Seconds())
}

func TestStartRefusesTablesWithoutNewImages(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	keysOnly, noStream := ddbtest.Name("keys"), ddbtest.Name("nostream")
	in := ddbtest.SimpleTableInput(keysOnly)
	in.StreamSpecification = &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeKeysOnly}
	env.CreateTable(t, in)
	env.CreateTable(t, ddbtest.SimpleTableInput(noStream))
	regions := []Region{{Name: regA, DDB: env.DDB, Streams: env.Streams}, {Name: regB, DDB: env.DDB, Streams: env.Streams}}
	for _, table := range []string{keysOnly, noStream, "missing"} {
		rep, err := Start(context.Background(), Config{Regions: regions, Tables: []string{table}})
		if err == nil {
			_ = rep.Close()
			t.Errorf("Start with table %s: no error", table)
		}
	}
}
