package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
	"github.com/ddb-outbox/ddb-outbox/internal/callcount"
	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// store measures the raw TransactWriteItems rate on a fresh server with
// as many 2-item transactions as the highest level wrote events (so the
// stream ends with the outbox stream's record count: INSERT + MODIFY per
// event), and counts the dual write on the same server afterwards.
func (b *benchRun) store(ctx context.Context) error {
	last := b.rep.Levels[len(b.rep.Levels)-1]
	n := last.Audit.Events
	dx, err := dynoxide.Start(ctx, nil)
	if err != nil {
		return err
	}
	defer dx.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(dx.Endpoint))
	if err := bench.CreatePlainTable(ctx, ddb, "raw-nostream", false); err != nil {
		return err
	}
	if err := bench.CreatePlainTable(ctx, ddb, "raw-stream", true); err != nil {
		return err
	}
	progress("raw store: %d 2-item TransactWriteItems, %d clients, table without stream", n, b.f.storeConc)
	b.rep.StoreNoStream = bench.StoreRate(ctx, ddb, "raw-nostream", n, 2, b.f.storeConc, false)
	progress("  %.0f transactions/s", b.rep.StoreNoStream.PerSecond)
	progress("raw store: %d 2-item TransactWriteItems, %d clients, table WITH a stream (fresh server)", n, b.f.storeConc)
	dxPID, self := bench.ChildPID("dynoxide"), os.Getpid()
	cpu0, dcpu0, t0 := bench.CPUTime(self), bench.CPUTime(dxPID), time.Now()
	b.rep.Store = bench.StoreRate(ctx, ddb, "raw-stream", n, 2, b.f.storeConc, true)
	b.rep.StoreCPU = cpuSplit{BenchSeconds: (bench.CPUTime(self) - cpu0).Seconds(), DynoxideSeconds: (bench.CPUTime(dxPID) - dcpu0).Seconds(), WallSeconds: time.Since(t0).Seconds()}
	progress("  %.0f transactions/s (%s)", b.rep.Store.PerSecond, b.rep.StoreCPU)
	if err := b.storeShapes(ctx, ddb, n); err != nil {
		return err
	}

	// Dual write: calls only (no stream on its table).
	dual := callcount.New()
	cfg := dynoxide.AWSConfig(dx.Endpoint)
	cfg.APIOptions = append(cfg.APIOptions, dual.Register, callcount.RequestConsumedCapacity)
	dclient := dynamodb.NewFromConfig(cfg)
	if err := bench.CreatePlainTable(ctx, ddb, "dual-orders", false); err != nil {
		return err
	}
	bus, err := localrt.NewBus(localrt.BusConfig{Name: "dual-bus", Logger: b.log})
	if err != nil {
		return err
	}
	defer func() { _ = bus.Close(context.Background()) }()
	dw := bench.DualWriter{DDB: dclient, EB: callcount.CountingPutEvents(dual, bus), Table: "dual-orders", Bus: "dual-bus", Source: appenv.EventSource}
	orders := b.f.naiveOrders
	progress("dual write: %d orders (PutItem/UpdateItem then PutEvents, no outbox)", orders)
	for i := 0; i < orders; i++ {
		if err := dw.CreateAndPay(ctx, i); err != nil {
			return err
		}
	}
	b.rep.DualWrite = dualRun{Orders: orders, Events: int64(2 * orders), Calls: dual.Snapshot()}
	return nil
}

func (b *benchRun) writePath(ctx context.Context) error {
	dx, err := dynoxide.Start(ctx, nil)
	if err != nil {
		return err
	}
	defer dx.Stop()
	// Time the order transactions only: the stack's client also carries the
	// notifier's transactions (OrderPlaced → notifier) running alongside.
	const prefix = "wp"
	timer := bench.NewOpTimer()
	timer.Key = bench.TransactKey(prefix+"-outbox", prefix+"-ledger", prefix+"-notifications")
	s, err := devstack.Start(ctx, devstack.Options{Endpoint: dx.Endpoint, Prefix: prefix, Logger: b.log, PollInterval: b.f.poll,
		AWSConfig: func(c *aws.Config) { c.APIOptions = append(c.APIOptions, timer.Register) }})
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Settings.OutboxTable != prefix+"-outbox" || s.Settings.LedgerTable != prefix+"-ledger" || s.Settings.NotificationsTable != prefix+"-notifications" {
		return fmt.Errorf("write path: unexpected table names %s, %s, %s", s.Settings.OutboxTable, s.Settings.LedgerTable, s.Settings.NotificationsTable)
	}
	if err := bench.CreatePlainTable(ctx, s.DDB, "wp-plain", false); err != nil {
		return err
	}
	progress("write path: %d sequential POST /orders interleaved with PutItem (fresh Dynoxide)", b.f.writeN)
	b.rep.WritePath = bench.WritePath(ctx, s.URL, s.DDB, "wp-plain", b.f.writeN)
	b.rep.RepoTransact = timer.Get("TransactWriteItems/api")
	b.rep.OtherTransact = timer.Get("TransactWriteItems/consumer")
	b.rep.RepoPutItem = timer.Get("PutItem")
	return nil
}

// lambdas reports each dist/<name>/bootstrap size (building dist with the
// Makefile's flags if missing) and the init time of a host build of each
// function against a fake Runtime API.
func (b *benchRun) lambdas(ctx context.Context) error {
	if b.f.skipLambda {
		return nil
	}
	// Every function make build builds (functions/<name>/main.go).
	fns, err := bench.Functions("functions")
	if err != nil {
		return err
	}
	ldflags := []string{"-tags", "lambda.norpc,notrace", "-trimpath", "-ldflags=-s -w"}
	for _, fn := range fns {
		p := filepath.Join("dist", fn, "bootstrap")
		if bench.FileSize(p) < 0 {
			progress("lambda: %s missing, building linux/arm64", p)
			args := append([]string{"build"}, ldflags...)
			args = append(args, "-o", p, "./functions/"+fn)
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("build %s: %w", fn, err)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "outboxdev-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	progress("lambda: building the %d functions for the host (%s/%s) into %s", len(fns), runtime.GOOS, runtime.GOARCH, tmp)
	args := append([]string{"build"}, ldflags...)
	args = append(args, "-o", tmp+string(os.PathSeparator))
	for _, fn := range fns {
		args = append(args, "./functions/"+fn)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("host build: %w", err)
	}
	dx, err := dynoxide.Start(ctx, nil)
	if err != nil {
		return err
	}
	defer dx.Stop()
	// A complete, minimal environment: dummy credentials, an explicit local
	// endpoint, no shared config files, no instance metadata, every
	// variable a function requires at init; never AWS.
	env := bench.InitEnv(dx.Endpoint)
	for _, fn := range fns {
		lr := lambdaRow{Name: fn, DistBytes: bench.FileSize(filepath.Join("dist", fn, "bootstrap")), HostBytes: bench.FileSize(filepath.Join(tmp, fn))}
		lr.Init = bench.MeasureInit(ctx, fn, filepath.Join(tmp, fn), env, b.f.initRuns)
		progress("lambda: %-10s dist %5.1f MB, init median %s ms %s", fn, float64(lr.DistBytes)/1e6, lr.Init.Median(), lr.Init.Error)
		b.rep.Lambdas = append(b.rep.Lambdas, lr)
	}
	return nil
}

// keyPrefix turns a level label into an Idempotency-Key prefix (printable
// ASCII without spaces or commas).
func keyPrefix(label string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, label)
}
