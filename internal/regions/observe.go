package regions

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Observe collects the Observation of rt: the Bank's commits, the
// statements (in the statement consumer's home Region), the notices (in
// the notify consumer's), what each Region's relay or reconciler published
// (its bus's events less those forwarded to it), the events each Region
// published under a takeover (its PUBLISHED marks), each Region's outbox
// stream read from TRIM_HORIZON, and the accounts in each Region. It
// returns the first read error.
func Observe(ctx context.Context, rt *Runtime) (Observation, error) {
	obs := Observation{Committed: rt.Bank.Committed(), Statements: map[string]StatementLine{}, Notices: map[string]int64{},
		PublishedBy: map[string]map[string]int{}, Statuses: map[string]map[string][]StatusChange{},
		Accounts: map[string]map[string]AccountState{}, TakenOver: map[string]string{}, Replicated: rt.repl != nil}
	homes := map[string]*Region{}
	for _, c := range homeConsumers() {
		homes[c.consumer.Name] = rt.Region(c.home)
	}
	err := scan(ctx, homes[Statement].Stack.DDB, StatementTable, func(item map[string]types.AttributeValue) error {
		account, ok := strings.CutPrefix(stringOf(item[dedup.AttrPK]), StatementKey(""))
		if !ok {
			return nil // the consumer's dedup state
		}
		var l StatementLine
		for _, v := range listOf(item["seqs"]) {
			n, err := numberOf(v)
			if err != nil {
				return err
			}
			l.Seqs = append(l.Seqs, n)
		}
		for _, v := range listOf(item["events"]) {
			if s, ok := v.(*types.AttributeValueMemberS); ok {
				l.Events = append(l.Events, s.Value)
			}
		}
		obs.Statements[account] = l
		return nil
	})
	if err != nil {
		return obs, err
	}
	err = scan(ctx, homes[Notify].Stack.DDB, NotifyTable, func(item map[string]types.AttributeValue) error {
		id, ok := strings.CutPrefix(stringOf(item[dedup.AttrPK]), NoticeKey(""))
		if !ok {
			return nil
		}
		n, err := numberOf(item["applied"])
		obs.Notices[id] = n
		return err
	})
	if err != nil {
		return obs, err
	}
	for _, r := range rt.Regions() {
		if err := observeRegion(ctx, r, &obs); err != nil {
			return obs, err
		}
	}
	return obs, nil
}

// observeRegion adds Region r's published events, outbox stream and
// accounts to obs.
func observeRegion(ctx context.Context, r *Region, obs *Observation) error {
	for id, n := range ownPublished(r) {
		if obs.PublishedBy[id] == nil {
			obs.PublishedBy[id] = map[string]int{}
		}
		obs.PublishedBy[id][r.Name] += n
	}
	for _, failed := range []string{RegionA, RegionB} {
		if failed == r.Name {
			continue
		}
		marks, err := publishedMarks(ctx, r.Stack.DDB, failed, r.Name)
		if err != nil {
			return fmt.Errorf("regions: %s: %w", r.Name, err)
		}
		for id := range marks {
			obs.TakenOver[id] = r.Name
		}
	}
	statuses, err := StreamStatuses(ctx, r.Stack.DDB, r.Stack.Streams, OutboxTable)
	if err != nil {
		return fmt.Errorf("regions: %s: %w", r.Name, err)
	}
	obs.Statuses[r.Name] = statuses
	accounts := map[string]AccountState{}
	err = scan(ctx, r.Stack.DDB, AccountsTable, func(item map[string]types.AttributeValue) error {
		bal, err := numberOf(item["balance"])
		if err != nil {
			return err
		}
		ver, err := numberOf(item[outbox.DefaultVersionAttribute])
		accounts[stringOf(item["id"])] = AccountState{Balance: bal, Version: ver, Home: stringOf(item["home"])}
		return err
	})
	obs.Accounts[r.Name] = accounts
	return err
}

// StreamStatuses reads the stream of table from TRIM_HORIZON to its end
// and returns each outbox record's images in stream order (per item, a
// stream keeps the order of its writes), keyed "<pk>/<sk>"; REMOVE records
// (TTL) and items that are not outbox records (no status) are left out.
func StreamStatuses(ctx context.Context, ddb *dynamodb.Client, streams *dynamodbstreams.Client, table string) (map[string][]StatusChange, error) {
	out := map[string][]StatusChange{}
	desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", table, err)
	}
	arn := desc.Table.LatestStreamArn
	var start *string
	for {
		ds, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn, ExclusiveStartShardId: start})
		if err != nil {
			return nil, fmt.Errorf("describe the stream of %s: %w", table, err)
		}
		for _, sh := range ds.StreamDescription.Shards {
			if err := readShard(ctx, streams, arn, sh.ShardId, out); err != nil {
				return nil, err
			}
		}
		if start = ds.StreamDescription.LastEvaluatedShardId; aws.ToString(start) == "" {
			return out, nil
		}
	}
}

func readShard(ctx context.Context, streams *dynamodbstreams.Client, arn, shard *string, out map[string][]StatusChange) error {
	it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: shard,
		ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		return fmt.Errorf("shard iterator %s: %w", aws.ToString(shard), err)
	}
	iter := it.ShardIterator
	for iter != nil {
		page, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			return fmt.Errorf("get records of %s: %w", aws.ToString(shard), err)
		}
		for _, rec := range page.Records {
			if rec.EventName == streamtypes.OperationTypeRemove || rec.Dynamodb == nil {
				continue
			}
			img := rec.Dynamodb.NewImage
			st, ok := img[outbox.AttrStatus].(*streamtypes.AttributeValueMemberS)
			if !ok {
				continue
			}
			gen := int64(0)
			if n, ok := img[outbox.AttrRedriveGeneration].(*streamtypes.AttributeValueMemberN); ok {
				gen, _ = strconv.ParseInt(n.Value, 10, 64)
			}
			key := streamString(img[outbox.AttrPK]) + "/" + streamString(img[outbox.AttrSK])
			out[key] = append(out[key], StatusChange{Status: st.Value, RedriveGeneration: gen, Origin: streamString(img[outbox.AttrOriginRegion])})
		}
		if len(page.Records) == 0 {
			return nil
		}
		iter = page.NextShardIterator
	}
	return nil
}

func streamString(v streamtypes.AttributeValue) string {
	if s, ok := v.(*streamtypes.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// scan calls f on every item of table (consistent reads).
func scan(ctx context.Context, ddb *dynamodb.Client, table string, f func(map[string]types.AttributeValue) error) error {
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("regions: scan %s: %w", table, err)
		}
		for _, item := range page.Items {
			if err := f(item); err != nil {
				return fmt.Errorf("regions: %s: %w", table, err)
			}
		}
	}
	return nil
}

func listOf(v types.AttributeValue) []types.AttributeValue {
	if l, ok := v.(*types.AttributeValueMemberL); ok {
		return l.Value
	}
	return nil
}

func stringOf(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// numberOf reads an N attribute (0 when absent).
func numberOf(v types.AttributeValue) (int64, error) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(n.Value, 10, 64)
}
