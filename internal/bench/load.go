package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// LoadOptions shape one load level. Each order is two commands through the
// HTTP API: POST /orders (with an Idempotency-Key), then POST
// /orders/{id}/pay, i.e. two committed changes and two outbox events
// (OrderPlaced for the notifier, OrderPaid for the notifier and the ledger).
type LoadOptions struct {
	// Orders is the number of orders to create and pay.
	Orders int
	// Rate, when > 0, paces order arrivals open-loop at Rate orders per
	// second (an arrival does not wait for earlier ones). 0 runs a closed
	// loop of Concurrency clients, as fast as the stack answers.
	Rate float64
	// Concurrency is the closed-loop client count, and the cap on orders in
	// flight in open-loop mode (default 16 closed, 512 open).
	Concurrency int
	// Prefix makes idempotency keys unique per run.
	Prefix string
	// Client is the HTTP client (default: 10 s timeout, 256 idle conns).
	Client *http.Client
	// Progress, when set, is called about every second.
	Progress func(done, failed int64, elapsed time.Duration)
}

// LoadResult is what the clients saw.
type LoadResult struct {
	Orders   int64 // orders created and paid (both 2xx)
	Commands int64 // acknowledged commands (201/200)
	Failed   int64 // transport errors and non-2xx answers
	Elapsed  time.Duration
	// Create is the client-side latency of POST /orders.
	Create Percentiles
	// Pay is the client-side latency of POST /orders/{id}/pay.
	Pay Percentiles
	// Lag is how late open-loop arrivals started behind their schedule
	// (0 in closed loop): a large Lag means the offered load was not offered.
	Lag Percentiles
}

// OrdersPerSecond is Orders / Elapsed.
func (r LoadResult) OrdersPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Orders) / r.Elapsed.Seconds()
}

// Load drives o.Orders orders through the API at baseURL.
func Load(ctx context.Context, baseURL string, o LoadOptions) LoadResult {
	if o.Concurrency == 0 {
		o.Concurrency = 16
		if o.Rate > 0 {
			o.Concurrency = 512
		}
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}
	}
	l := &loader{base: baseURL, o: o}
	start := time.Now()
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
					o.Progress(l.orders.Load(), l.failed.Load(), time.Since(start))
				}
			}
		}()
	}
	var wg sync.WaitGroup
	var lags []time.Duration
	if o.Rate > 0 {
		sem := make(chan struct{}, o.Concurrency)
		interval := time.Duration(float64(time.Second) / o.Rate)
		lags = make([]time.Duration, 0, o.Orders)
		for i := 0; i < o.Orders && ctx.Err() == nil; i++ {
			due := start.Add(time.Duration(i) * interval)
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			sem <- struct{}{}
			lags = append(lags, time.Since(due))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				l.order(ctx, i)
			}()
		}
	} else {
		var next atomic.Int64
		for w := 0; w < o.Concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					i := next.Add(1) - 1
					if i >= int64(o.Orders) {
						return
					}
					l.order(ctx, int(i))
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	return LoadResult{
		Orders: l.orders.Load(), Commands: l.commands.Load(), Failed: l.failed.Load(),
		Elapsed: time.Since(start),
		Create:  NewPercentiles(l.create), Pay: NewPercentiles(l.pay), Lag: NewPercentiles(lags),
	}
}

type loader struct {
	base                     string
	o                        LoadOptions
	orders, commands, failed atomic.Int64
	mu                       sync.Mutex
	create, pay              []time.Duration
}

func (l *loader) order(ctx context.Context, i int) {
	body := fmt.Sprintf(`{"customer_id":"customer-%d","amount_minor":%d,"currency":"EUR"}`, i%50, 100+i%10000)
	var o struct {
		ID string `json:"id"`
	}
	d, ok := l.post(ctx, "/orders", body, fmt.Sprintf("%s-%d", l.o.Prefix, i), http.StatusCreated, &o)
	if !ok || o.ID == "" {
		return
	}
	l.record(&l.create, d)
	d, ok = l.post(ctx, "/orders/"+o.ID+"/pay", "", "", http.StatusOK, nil)
	if !ok {
		return
	}
	l.record(&l.pay, d)
	l.orders.Add(1)
}

func (l *loader) record(dst *[]time.Duration, d time.Duration) {
	l.mu.Lock()
	*dst = append(*dst, d)
	l.mu.Unlock()
}

// post sends one command and reports its latency and whether it got want.
func (l *loader) post(ctx context.Context, path, body, key string, want int, out any) (time.Duration, bool) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+path, rd)
	if err != nil {
		l.failed.Add(1)
		return 0, false
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	start := time.Now()
	resp, err := l.o.Client.Do(req)
	if err != nil {
		l.failed.Add(1)
		return 0, false
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != want {
		l.failed.Add(1)
		return d, false
	}
	l.commands.Add(1)
	if out != nil {
		_ = json.Unmarshal(b, out)
	}
	return d, true
}
