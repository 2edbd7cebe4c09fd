package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
)

// shapeCalls is the number of calls of each store-shape run.
const shapeCalls = 1500

// storeShapes measures what a call costs the store by its shape, on the
// raw run's server and table without a stream (whose writes do not slow
// down as the stream grows): TransactWriteItems of 1 to 4 new items and a
// strongly consistent GetItem, each shapeCalls calls from the raw run's
// clients. The pipeline's calls come in these shapes (an order 2 items, a
// consumer 2 to 4, the reads before a command), so the table tells how
// many calls per second a store-bound pipeline can drive. written is the
// number of items the raw run without a stream wrote (GetItem reads them).
func (b *benchRun) storeShapes(ctx context.Context, ddb *dynamodb.Client, written int) error {
	b.rep.StoreShapes = nil
	for items := 1; items <= 4; items++ {
		table := fmt.Sprintf("raw-shape-%d", items)
		if err := bench.CreatePlainTable(ctx, ddb, table, false); err != nil {
			return err
		}
		progress("store cost by shape: %d %d-item TransactWriteItems, %d clients, table without stream", shapeCalls, items, b.f.storeConc)
		r := bench.StoreRate(ctx, ddb, table, shapeCalls, items, b.f.storeConc, false)
		progress("  %.0f transactions/s", r.PerSecond)
		b.rep.StoreShapes = append(b.rep.StoreShapes, storeShape{Call: fmt.Sprintf("TransactWriteItems, %d new %s", items, map[bool]string{true: "item", false: "items"}[items == 1]), Items: items, Rate: r})
	}
	progress("store cost by shape: %d GetItem (strongly consistent), %d clients", shapeCalls, b.f.storeConc)
	r := bench.GetItemRate(ctx, ddb, "raw-nostream", shapeCalls, written, b.f.storeConc)
	progress("  %.0f reads/s", r.PerSecond)
	b.rep.StoreShapes = append(b.rep.StoreShapes, storeShape{Call: "GetItem, strongly consistent", Read: true, Rate: r})
	return nil
}

// storeShape is one row of the store-cost-by-shape table (section b).
type storeShape struct {
	Call  string                `json:"call"`
	Items int                   `json:"items_written"` // 0 for a read
	Read  bool                  `json:"read,omitempty"`
	Rate  bench.StoreRateResult `json:"rate"`
}

// shapesMarkdown is section b's table of what a call costs the store by
// its shape, and its finding ("" when not measured). conc is the raw
// runs' client count.
func shapesMarkdown(shapes []storeShape, conc int) string {
	if len(shapes) == 0 {
		return ""
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("")
	p("What a call costs this store by its shape (the raw run's server, a table without a stream, whose writes do not slow down as the stream grows; %d calls each, %d clients):", shapeCalls, conc)
	p("")
	p("| call | calls/s | items written/s | time per call ÷ a 2-item transaction's |")
	p("|---|---|---|---|")
	two := shapeRate(shapes, 2)
	for _, sh := range shapes {
		rel := "n/a"
		if sh.Rate.PerSecond > 0 && two > 0 {
			rel = fmt.Sprintf("%.2f", two/sh.Rate.PerSecond)
		}
		p("| %s | %.0f | %.0f | %s |", sh.Call, sh.Rate.PerSecond, float64(sh.Items)*sh.Rate.PerSecond, rel)
	}
	p("")
	p("%s", shapeFinding(shapes))
	return w.String()
}

// shapeRate is the rate of the items-item transaction shape (0 when not
// measured).
func shapeRate(shapes []storeShape, items int) float64 {
	for _, sh := range shapes {
		if !sh.Read && sh.Items == items {
			return sh.Rate.PerSecond
		}
	}
	return 0
}

// shapeFinding says what the shape table means for the call ratio: the
// step from 3 to 4 items, and what a read costs against a transaction.
func shapeFinding(shapes []storeShape) string {
	three, four, two := shapeRate(shapes, 3), shapeRate(shapes, 4), shapeRate(shapes, 2)
	var read float64
	for _, sh := range shapes {
		if sh.Read {
			read = sh.Rate.PerSecond
		}
	}
	if three <= 0 || four <= 0 || two <= 0 || read <= 0 {
		return "Some shapes failed to measure; see the JSON report."
	}
	return fmt.Sprintf("A store's cost follows what a call writes, not the call: here a 4-item transaction takes %.2f× the time of a 3-item one "+
		"and %.2f× a 2-item one's, so a pipeline whose calls average more items than the raw run's drives fewer calls per second at the same "+
		"store load, and `pipeline_to_store_ratio` (calls) stays below `pipeline_to_store_items_ratio` (items). A strongly consistent GetItem "+
		"takes %.2f× a 2-item transaction's time: the reads before a command's transaction cost the store little.",
		three/four, two/four, two/read)
}
