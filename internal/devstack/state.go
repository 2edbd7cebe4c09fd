package devstack

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/localstate"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// openState opens Options.RuntimeStateFile, bound to the outbox table's stream,
// and returns it as the store of the queues, the bus and the provider; nil
// (and a warning with an Endpoint) when the state is kept in memory.
func (s *Stack) openState(ctx context.Context, opts Options) (localrt.StateStore, error) {
	if opts.RuntimeStateFile == "" {
		if opts.Endpoint != "" {
			s.log.Warn("the local queues, the bus's undelivered events and the provider are in memory while the server at the endpoint keeps the data: a stop loses what they hold (RuntimeStateFile keeps them)", "endpoint", opts.Endpoint)
		}
		return nil, nil
	}
	out, err := s.DDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.Settings.OutboxTable)})
	if err != nil {
		return nil, fmt.Errorf("devstack: describe %s: %w", s.Settings.OutboxTable, err)
	}
	arn := aws.ToString(out.Table.LatestStreamArn)
	j, err := localstate.Open(opts.RuntimeStateFile, localstate.Options{Binding: arn})
	if err != nil {
		return nil, fmt.Errorf("devstack: the local runtime's state file: %w", err)
	}
	s.state = j
	info := j.Info()
	if info.Discarded > 0 {
		s.log.Warn("discarded the local runtime's state of a former data set (the outbox table has a new stream)", "file", opts.RuntimeStateFile, "records", info.Discarded, "old_stream", info.OldBinding)
	}
	if info.Damaged() {
		s.log.Warn("the local runtime's state file was damaged: kept every record it could (the records up to the damage, and those after a damaged record that could be skipped) and copied the file as it was aside; a message or undelivered event a lost record held is not delivered: if an audit then reports events not applied, re-send them (outboxctl replay, or the console's Replay)",
			"file", opts.RuntimeStateFile, "copy", info.DamagedCopy, "records_kept", info.Records, "records_skipped", info.SkippedRecords, "bytes_dropped_at_end", info.TornBytes)
	}
	if info.Records > 0 {
		s.log.Info("resuming the local runtime's state: queues, undelivered events, provider", "file", opts.RuntimeStateFile, "records", info.Records)
	}
	return j, nil
}
