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
	if info.TornBytes > 0 {
		s.log.Warn("dropped the unfinished last write of the local runtime's state (the process was killed while writing it; it had not been acknowledged)", "file", opts.RuntimeStateFile, "bytes", info.TornBytes)
	}
	if info.Records > 0 {
		s.log.Info("resuming the local runtime's state: queues, undelivered events, provider", "file", opts.RuntimeStateFile, "records", info.Records)
	}
	return j, nil
}
