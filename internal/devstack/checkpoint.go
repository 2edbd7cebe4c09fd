package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// checkpointFile is the stream event source mapping's saved position, kept
// next to the data so that a restarted stack resumes where it stopped, as a
// Lambda event source mapping keeps its checkpoint across deployments,
// instead of reading (and re-publishing) the stream from its start.
type checkpointFile struct {
	// StreamARN is the stream the checkpoints belong to; a new stream (the
	// table was recreated) starts from TRIM_HORIZON.
	StreamARN string `json:"stream_arn"`
	// Checkpoints maps shard id to the last processed sequence number.
	Checkpoints map[string]string `json:"checkpoints"`
	SavedAt     time.Time         `json:"saved_at"`
}

// loadCheckpoints returns the checkpoints saved in path for the outbox
// table's current stream, or nil when there is no file or it belongs to
// another stream.
func loadCheckpoints(ctx context.Context, ddb *dynamodb.Client, table, path string) (map[string]string, string, error) {
	out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return nil, "", fmt.Errorf("devstack: describe %s: %w", table, err)
	}
	arn := aws.ToString(out.Table.LatestStreamArn)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, arn, nil
	}
	if err != nil {
		return nil, arn, fmt.Errorf("devstack: read checkpoints: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, arn, fmt.Errorf("devstack: checkpoint file %s: %w", path, err)
	}
	if f.StreamARN != arn {
		return nil, arn, nil
	}
	return f.Checkpoints, arn, nil
}

// saveCheckpoints writes the checkpoints atomically (temp file + rename).
func saveCheckpoints(path, arn string, cps map[string]string) error {
	b, err := json.MarshalIndent(checkpointFile{StreamARN: arn, Checkpoints: cps, SavedAt: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// keepCheckpoints saves the poller's checkpoints every second while they
// change, and once more when ctx ends.
func (s *Stack) keepCheckpoints(ctx context.Context, path, arn string) {
	var last map[string]string
	save := func() {
		cp := s.poller().Checkpoint()
		if len(cp) == 0 || maps.Equal(cp, last) {
			return
		}
		if err := saveCheckpoints(path, arn, cp); err != nil {
			s.log.Warn("could not save the stream checkpoints", "file", path, "error", err)
			return
		}
		last = cp
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case <-t.C:
			save()
		}
	}
}
