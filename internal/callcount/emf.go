package callcount

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// EMF metric names written by WriteEMF, in namespace config.MetricNamespace
// with dimensions Service and Operation (plus the caller's).
const (
	MetricCalls         = "AWSCalls"              // Count: operation calls
	MetricAttempts      = "AWSCallAttempts"       // Count: HTTP requests, retries included
	MetricErrors        = "AWSCallErrors"         // Count: calls that returned an error
	MetricCapacityUnits = "ConsumedCapacityUnits" // None: summed DynamoDB ConsumedCapacity.CapacityUnits
	DimensionService    = "Service"
	DimensionOperation  = "Operation"
)

// WriteEMF writes the current counts to w in CloudWatch embedded metric
// format: one JSON line per (service, operation) row, since each EMF line
// carries one value per dimension. Each line has namespace
// config.MetricNamespace, the dimension set {dims keys..., Service,
// Operation} and the metrics AWSCalls, AWSCallAttempts, AWSCallErrors
// (Count) and ConsumedCapacityUnits (None). dims adds fixed dimensions,
// e.g. {config.MetricDimensionOutboxTable: table}; CloudWatch allows at most
// 30 dimensions per set. In Lambda, writing the lines to stdout publishes
// the metrics. It writes nothing when nothing was counted and returns the
// first write or encoding error. Format:
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
func (c *Counter) WriteEMF(w io.Writer, dims map[string]string) error {
	return c.Snapshot().WriteEMF(w, dims, time.Now())
}

// WriteEMF writes the table as EMF lines stamped with now; see
// Counter.WriteEMF for the format.
func (t Table) WriteEMF(w io.Writer, dims map[string]string, now time.Time) error {
	if len(dims) > 28 {
		return fmt.Errorf("callcount: %d dimensions, at most 28 besides Service and Operation", len(dims))
	}
	names := make([]string, 0, len(dims)+2)
	for k := range dims {
		if k == DimensionService || k == DimensionOperation {
			return fmt.Errorf("callcount: dimension %q is reserved", k)
		}
		names = append(names, k)
	}
	sort.Strings(names)
	names = append(names, DimensionService, DimensionOperation)
	type def struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	meta := map[string]any{
		"Timestamp": now.UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  config.MetricNamespace,
			"Dimensions": [][]string{names},
			"Metrics": []def{
				{MetricCalls, "Count"},
				{MetricAttempts, "Count"},
				{MetricErrors, "Count"},
				{MetricCapacityUnits, "None"},
			},
		}},
	}
	for _, r := range t {
		line := make(map[string]any, len(dims)+7)
		for k, v := range dims {
			line[k] = v
		}
		line["_aws"] = meta
		line[DimensionService] = r.Service
		line[DimensionOperation] = r.Operation
		line[MetricCalls] = r.Calls
		line[MetricAttempts] = r.Attempts
		line[MetricErrors] = r.Errors
		line[MetricCapacityUnits] = r.CapacityUnits
		b, err := json.Marshal(line)
		if err != nil {
			return fmt.Errorf("callcount: encode EMF: %w", err)
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("callcount: write EMF: %w", err)
		}
	}
	return nil
}
