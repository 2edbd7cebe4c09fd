package mrec

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// TestLatestStartAndAdoption: with StartingPosition Latest, writes made
// before Start are not replicated; an item that predates Start in the
// destination is adopted once the destination's stream has been read past
// it, and the replicated write lands.
func TestLatestStartAndAdoption(t *testing.T) {
	t.Parallel()
	p := newServers(t)
	p.put(t, regA, map[string]any{"pk": "before"})
	p.put(t, regB, map[string]any{"pk": "k", "v": "old"})
	p.start(t, Config{Seed: 21, StartingPosition: Latest}, nil)
	p.settle(t) // every shard has a LATEST iterator now
	p.put(t, regA, map[string]any{"pk": "k", "v": "new"})
	p.settle(t)
	if p.get(t, regB, "before") != nil {
		t.Error("a write made before Start was replicated with StartingPosition Latest")
	}
	if got := p.get(t, regB, "k"); got["v"] != "new" {
		t.Errorf("B holds %v, want v=new", got)
	}
	if s := p.rep.Stats().Direction(regA, regB); s.Adopted != 1 || s.Replicated != 1 {
		t.Errorf("A->B %+v: want B's pre-Start item adopted once, 1 replicated", s)
	}
}

const syntheticPrefix = "shardId-synthetic-"

// lineageStreams adds synthetic closed shards to the stream of table: parent, the
// parent of every real shard, and late, listed only once showLate is set.
// Their iterators are "synthetic|<shard>"; one GetRecords returns all their
// records and no next iterator (a closed shard read to its end).
type lineageStreams struct {
	StreamsAPI
	table    string
	records  map[string][]streamtypes.Record // synthetic shard → records
	showLate atomic.Bool
}

func (l *lineageStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opt ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	out, err := l.StreamsAPI.DescribeStream(ctx, in, opt...)
	if err != nil || out.StreamDescription == nil || in.ExclusiveStartShardId != nil ||
		!strings.Contains(aws.ToString(in.StreamArn), "/"+l.table+"/") {
		return out, err
	}
	shards := []streamtypes.Shard{{ShardId: aws.String(syntheticPrefix + "parent")}}
	for _, sh := range out.StreamDescription.Shards {
		sh.ParentShardId = aws.String(syntheticPrefix + "parent")
		shards = append(shards, sh)
	}
	if l.showLate.Load() {
		shards = append(shards, streamtypes.Shard{ShardId: aws.String(syntheticPrefix + "late")})
	}
	out.StreamDescription.Shards = shards
	return out, nil
}

func (l *lineageStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opt ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if id := aws.ToString(in.ShardId); strings.HasPrefix(id, syntheticPrefix) {
		return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String("synthetic|" + id)}, nil
	}
	return l.StreamsAPI.GetShardIterator(ctx, in, opt...)
}

func (l *lineageStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opt ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if id, ok := strings.CutPrefix(aws.ToString(in.ShardIterator), "synthetic|"); ok {
		// A slow parent: a child read without waiting would be read first.
		time.Sleep(100 * time.Millisecond)
		return &dynamodbstreams.GetRecordsOutput{Records: l.records[id]}, nil
	}
	return l.StreamsAPI.GetRecords(ctx, in, opt...)
}

func insertRecord(seq, pk, v string) streamtypes.Record {
	return streamtypes.Record{EventName: streamtypes.OperationTypeInsert, Dynamodb: &streamtypes.StreamRecord{
		SequenceNumber: aws.String(seq),
		Keys:           map[string]streamtypes.AttributeValue{"pk": sAttr(pk)},
		NewImage:       map[string]streamtypes.AttributeValue{"pk": sAttr(pk), "v": sAttr(v)},
	}}
}

// TestShardLineageAndNewShards: a parent shard is read to its end before
// its children (else its older image of k would be read last and win), and
// a shard appearing later is found and read.
func TestShardLineageAndNewShards(t *testing.T) {
	t.Parallel()
	p := newServers(t)
	p.put(t, regA, map[string]any{"pk": "k", "v": "new"}) // in the real (child) shard
	var lin *lineageStreams
	p.start(t, Config{Seed: 23}, func(region string, s StreamsAPI) StreamsAPI {
		if region != regA {
			return s
		}
		lin = &lineageStreams{StreamsAPI: s, table: p.table, records: map[string][]streamtypes.Record{
			syntheticPrefix + "parent": {insertRecord("100", "p1", "parent"), insertRecord("101", "k", "old")},
			syntheticPrefix + "late":   {insertRecord("200", "late1", "late")},
		}}
		return lin
	})
	p.settle(t)
	if got := p.get(t, regB, "p1"); got["v"] != "parent" {
		t.Errorf("p1 from the parent shard: B holds %v", got)
	}
	if got := p.get(t, regB, "k"); got["v"] != "new" {
		t.Errorf("B holds k=%v, want new: the child shard was read before its parent", got)
	}
	lin.showLate.Store(true)
	p.settle(t)
	if got := p.get(t, regB, "late1"); got["v"] != "late" {
		t.Errorf("late1 from the shard found later: B holds %v", got)
	}
	if s := p.rep.Stats().Region(regA); s.Shards != 4 || s.LocalWrites != 4 {
		t.Errorf("Region A %+v: want 4 shards (3 in the table's stream, 1 in the other table's), 4 local writes", s)
	}
}
