package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/renameio/v2/maybe"
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
//
// A damaged file — empty, cut short, not JSON, or without a stream and
// numeric sequence numbers — does not stop the stack: it is moved aside to
// path + ".damaged", one warning names both files, and nil is returned, so
// the event source mapping reads the stream from TRIM_HORIZON, its oldest
// record. What was published already is published again; the consumers'
// dedup markers absorb the duplicates (invariant I3), so nothing is lost
// and nothing is applied twice. A file that cannot be read at all (not
// damage: permissions, I/O) is still an error.
func loadCheckpoints(ctx context.Context, ddb *dynamodb.Client, table, path string, log *slog.Logger) (map[string]string, string, error) {
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
	f, err := parseCheckpoints(b)
	if err != nil {
		aside := path + ".damaged"
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, arn, fmt.Errorf("devstack: checkpoint file %s is damaged (%v) and could not be moved aside: %w", path, err, rerr)
		}
		log.Warn("the stream checkpoint file is damaged: moved it aside and reading the outbox stream from its oldest record (TRIM_HORIZON); records already published are published again and the consumers' dedup absorbs the duplicates",
			"file", path, "moved_to", aside, "damage", err.Error())
		return nil, arn, nil
	}
	if f.StreamARN != arn {
		return nil, arn, nil
	}
	return f.Checkpoints, arn, nil
}

// parseCheckpoints decodes a checkpoint file, refusing one that is not
// what saveCheckpoints writes: empty, cut short, not one JSON object,
// without a stream ARN, or with a shard id or sequence number that is not
// one (sequence numbers are decimal digits, API_streams_StreamRecord).
func parseCheckpoints(b []byte) (checkpointFile, error) {
	var f checkpointFile
	if len(bytes.TrimSpace(b)) == 0 {
		return f, errors.New("empty file")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&f); err != nil {
		return f, err
	}
	if dec.More() {
		return f, errors.New("data after the JSON object")
	}
	if f.StreamARN == "" {
		return f, errors.New("no stream_arn")
	}
	for shard, seq := range f.Checkpoints {
		if shard == "" || seq == "" || strings.Trim(seq, "0123456789") != "" {
			return f, fmt.Errorf("shard %q: %q is not a sequence number", shard, seq)
		}
	}
	return f, nil
}

// saveCheckpoints writes the checkpoints atomically: a temporary file in
// the same directory, fsynced, renamed over path (renameio), so a crash
// leaves the old file or the new one, never a cut one. (On Windows, where
// renameio cannot promise that, a plain write; loadCheckpoints recovers
// from a cut file.)
func saveCheckpoints(path, arn string, cps map[string]string) error {
	b, err := json.MarshalIndent(checkpointFile{StreamARN: arn, Checkpoints: cps, SavedAt: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return maybe.WriteFile(path, b, 0o644)
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
