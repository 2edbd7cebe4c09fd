package relay

import (
	"encoding/json"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// CloudWatch metric units used with EMF.
const (
	UnitCount   = "Count"
	UnitSeconds = "Seconds"
)

// Metric is one value of an EMF line.
type Metric struct {
	Value float64
	Unit  string
}

// EMF writes CloudWatch embedded metric format lines: one JSON object per
// line with an "_aws" metadata member, namespace config.MetricNamespace and
// the single dimension config.MetricDimensionOutboxTable. In Lambda, writing
// such a line to stdout publishes the metrics. Format:
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
// It is safe for concurrent use; write errors are ignored (metrics are best
// effort, the logs carry the same numbers).
type EMF struct {
	mu    sync.Mutex
	w     io.Writer
	table string
	now   func() time.Time
}

// NewEMF returns an EMF writer for the outbox table's dimension value.
func NewEMF(w io.Writer, table string) *EMF {
	return &EMF{w: w, table: table, now: time.Now}
}

// Emit writes one EMF line holding every metric in metrics (name → value).
func (e *EMF) Emit(metrics map[string]Metric) {
	if e == nil || e.w == nil || e.w == io.Discard || len(metrics) == 0 {
		return
	}
	names := make([]string, 0, len(metrics))
	for n := range metrics {
		names = append(names, n)
	}
	sort.Strings(names)
	type def struct {
		Name string `json:"Name"`
		Unit string `json:"Unit,omitempty"`
	}
	defs := make([]def, len(names))
	line := map[string]any{config.MetricDimensionOutboxTable: e.table}
	for i, n := range names {
		defs[i] = def{Name: n, Unit: metrics[n].Unit}
		line[n] = metrics[n].Value
	}
	line["_aws"] = map[string]any{
		"Timestamp": e.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  config.MetricNamespace,
			"Dimensions": [][]string{{config.MetricDimensionOutboxTable}},
			"Metrics":    defs,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(b)
}
