package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DriveOptions shape a load run through the HTTP API.
type DriveOptions struct {
	// Orders is the number of orders to create (default 300).
	Orders int
	// Concurrency is the number of concurrent clients (default 8).
	Concurrency int
	// Seed makes the scenario mix reproducible (default 1).
	Seed uint64
	// Client is the HTTP client (default: 10 s timeout).
	Client *http.Client
	// Progress, when set, receives a line about every second.
	Progress func(*DriveReport)
	// Logger receives unexpected responses.
	Logger *slog.Logger
}

// DriveReport counts what the clients saw. Acked is the number of changes
// the API confirmed as committed (201 on create, 200 on a command); with no
// ambiguous responses it must equal the audit's Committed.
type DriveReport struct {
	Orders     int64
	Acked      int64
	Replays    int64 // retried creates answered 200 with the first order
	Conflicts  int64 // 409 on a command (lost race or invalid transition)
	Rejected   int64 // 4xx on purposely invalid requests
	Ambiguous  int64 // transport errors and 5xx: the change may or may not have committed
	Unexpected int64 // any answer that breaks the API contract
	Latencies  []time.Duration
	latMu      sync.Mutex
	Elapsed    time.Duration
}

func (r *DriveReport) lat(d time.Duration) {
	r.latMu.Lock()
	r.Latencies = append(r.Latencies, d)
	r.latMu.Unlock()
}

// String is a one-line progress or final report.
func (r *DriveReport) String() string {
	return fmt.Sprintf("orders=%d acked_changes=%d replays=%d conflicts=%d rejected=%d ambiguous=%d unexpected=%d",
		atomic.LoadInt64(&r.Orders), atomic.LoadInt64(&r.Acked), atomic.LoadInt64(&r.Replays),
		atomic.LoadInt64(&r.Conflicts), atomic.LoadInt64(&r.Rejected), atomic.LoadInt64(&r.Ambiguous), atomic.LoadInt64(&r.Unexpected))
}

type orderJSON struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Version int64  `json:"version"`
}

// Drive runs the scenario mix against baseURL: every order is created with
// an Idempotency-Key (an ambiguous answer is retried with the same key, up to
// 4 attempts; 10% of creates are retried anyway and must return the first
// order), 85% are paid, then shipped, cancelled after
// payment, or raced (ship and cancel sent concurrently: exactly one wins);
// 30% of unpaid orders are cancelled; 5% of orders also send an invalid
// request that must be rejected with 4xx and write nothing.
func Drive(ctx context.Context, baseURL string, o DriveOptions) *DriveReport {
	if o.Orders == 0 {
		o.Orders = 300
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	d := &driver{base: baseURL, o: o, rep: &DriveReport{}}
	start := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				d.order(ctx, i)
			}
		}()
	}
	stop := make(chan struct{})
	if o.Progress != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					o.Progress(d.rep)
				}
			}
		}()
	}
	for i := 0; i < o.Orders && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(stop)
	d.rep.Elapsed = time.Since(start)
	return d.rep
}

type driver struct {
	base string
	o    DriveOptions
	rep  *DriveReport
}

var currencies = []string{"EUR", "USD", "JPY", "GBP"}

func (d *driver) order(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(d.o.Seed, uint64(i))) //nolint:gosec // G115: i is an order index, >= 0
	key := fmt.Sprintf("demo-%d-%d", d.o.Seed, i)
	body := fmt.Sprintf(`{"customer_id":"customer-%d","amount_minor":%d,"currency":"%s"}`, rng.IntN(50), 100+rng.IntN(100000), currencies[rng.IntN(len(currencies))])
	// A client retries an ambiguous create (transport error or 5xx) with
	// the same Idempotency-Key, as the API asks: 201 if the first attempt
	// never committed, 200 with the first order if it did.
	var status int
	var o orderJSON
	ok := false
	for attempt := 0; attempt < 4 && !ok && ctx.Err() == nil; attempt++ {
		status, o, ok = d.call(ctx, http.MethodPost, "/orders", body, key)
		if ok && attempt > 0 && status == http.StatusOK {
			status = http.StatusCreated // committed by an earlier, ambiguous attempt
		}
	}
	if !ok || status != http.StatusCreated {
		d.expect(!ok || status == http.StatusCreated, "create: status %d", status)
		return
	}
	atomic.AddInt64(&d.rep.Orders, 1)
	atomic.AddInt64(&d.rep.Acked, 1)
	if rng.Float64() < 0.10 { // a client retry of the same create
		st, again, ok := d.call(ctx, http.MethodPost, "/orders", body, key)
		if ok {
			d.expect(st == http.StatusOK && again.ID == o.ID, "replayed create: status %d id %s want 200 %s", st, again.ID, o.ID)
			atomic.AddInt64(&d.rep.Replays, 1)
		}
	}
	if rng.Float64() < 0.05 { // invalid requests write nothing
		st, _, ok := d.call(ctx, http.MethodPost, "/orders", `{"customer_id":"c","amount_minor":-5,"currency":"XYZ"}`, "")
		if ok {
			d.expect(st == http.StatusUnprocessableEntity, "invalid create: status %d", st)
			atomic.AddInt64(&d.rep.Rejected, 1)
		}
		st, _, ok = d.call(ctx, http.MethodPost, "/orders/"+o.ID+"/ship", "", "")
		if ok {
			d.expect(st == http.StatusConflict, "ship before pay: status %d", st)
			atomic.AddInt64(&d.rep.Rejected, 1)
		}
	}
	if rng.Float64() >= 0.85 {
		if rng.Float64() < 0.30 {
			d.command(ctx, o.ID, "cancel", `{"reason":"customer changed their mind"}`)
		}
		return
	}
	if !d.command(ctx, o.ID, "pay", "") {
		return
	}
	switch r := rng.Float64(); {
	case r < 0.60:
		d.command(ctx, o.ID, "ship", "")
	case r < 0.80:
		d.command(ctx, o.ID, "cancel", `{"reason":"out of stock"}`)
	default: // a race: exactly one of ship and cancel wins
		var wg sync.WaitGroup
		var wins atomic.Int64
		for _, c := range []string{"ship", "cancel"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if d.command(ctx, o.ID, c, "") {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		d.expect(wins.Load() <= 1, "race on %s: %d winners", o.ID, wins.Load())
	}
}

// command sends POST /orders/{id}/{name}; it reports whether the change was
// acknowledged (200). A 409 counts as a conflict.
func (d *driver) command(ctx context.Context, id, name, body string) bool {
	st, _, ok := d.call(ctx, http.MethodPost, "/orders/"+id+"/"+name, body, "")
	if !ok {
		return false
	}
	switch st {
	case http.StatusOK:
		atomic.AddInt64(&d.rep.Acked, 1)
		return true
	case http.StatusConflict:
		atomic.AddInt64(&d.rep.Conflicts, 1)
	default:
		d.expect(false, "%s %s: status %d", name, id, st)
	}
	return false
}

func (d *driver) call(ctx context.Context, method, path, body, key string) (int, orderJSON, bool) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		d.expect(false, "build request: %v", err)
		return 0, orderJSON{}, false
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	start := time.Now()
	resp, err := d.o.Client.Do(req)
	if err != nil {
		atomic.AddInt64(&d.rep.Ambiguous, 1)
		return 0, orderJSON{}, false
	}
	defer resp.Body.Close()
	d.rep.lat(time.Since(start))
	var o orderJSON
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		atomic.AddInt64(&d.rep.Ambiguous, 1)
		return resp.StatusCode, o, false
	}
	if resp.StatusCode < 300 {
		_ = json.Unmarshal(b, &o)
	}
	return resp.StatusCode, o, true
}

func (d *driver) expect(ok bool, format string, args ...any) {
	if !ok {
		atomic.AddInt64(&d.rep.Unexpected, 1)
		d.o.Logger.Error("unexpected API answer: " + fmt.Sprintf(format, args...))
	}
}
