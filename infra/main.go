package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/stack"
)

// Context keys read from cdk.json or `cdk -c key=value`.
const (
	ctxStackName      = "ddb-outbox:stackName"      // string, default DefaultStackName
	ctxAssetRoot      = "ddb-outbox:assetRoot"      // path, default <dir of cdk.json>/dist
	ctxAuthMode       = "ddb-outbox:authMode"       // IAM (default) or NONE
	ctxEventSource    = "ddb-outbox:eventSource"    // default config.DefaultEventSource
	ctxDestroy        = "ddb-outbox:destroy"        // bool, default false
	ctxNag            = "ddb-outbox:nag"            // bool, default true
	ctxBatchSize      = "ddb-outbox:batchSize"      // int, 1..10000
	ctxBatchingWindow = "ddb-outbox:batchingWindow" // int seconds, 0..300
	ctxPendingShards  = "ddb-outbox:pendingShards"  // int, 1..256
	ctxReconcileRate  = "ddb-outbox:reconcileRate"  // int minutes, >= 1
)

// DefaultStackName is the CloudFormation stack name.
const DefaultStackName = "DdbOutbox"

func main() {
	err := run()
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	app := awscdk.NewApp(nil)
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	get := func(key string) any { return app.Node().TryGetContext(jsii.String(key)) }
	cfg, err := fromContext(get, cwd)
	if err != nil {
		return err
	}
	if _, err := stack.NewOrdersStack(app, cfg.stackName, cfg.props); err != nil {
		return err
	}
	if cfg.nag {
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	}
	app.Synth(nil)
	return nil
}

// appConfig is what the app reads from the CDK context.
type appConfig struct {
	stackName string
	nag       bool
	props     stack.OrdersStackProps
}

// fromContext builds the app configuration from context values (get returns
// nil for an unset key; values are strings from the command line or JSON
// values from cdk.json). cwd is where the app runs (infra/ under cdk.json).
func fromContext(get func(string) any, cwd string) (appConfig, error) {
	cfg := appConfig{stackName: DefaultStackName, nag: true}
	var errs []error
	str := func(key string) string {
		switch v := get(key).(type) {
		case nil:
			return ""
		case string:
			return v
		default:
			return fmt.Sprint(v)
		}
	}
	integer := func(key string) int {
		s := str(key)
		if s == "" {
			return 0
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s=%q is not an integer", key, s))
		}
		return n
	}
	boolean := func(key string, def bool) bool {
		s := str(key)
		if s == "" {
			return def
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s=%q is not a boolean", key, s))
		}
		return b
	}
	if s := str(ctxStackName); s != "" {
		cfg.stackName = s
	}
	cfg.nag = boolean(ctxNag, true)
	p := &cfg.props
	p.AssetRoot = str(ctxAssetRoot)
	if p.AssetRoot == "" {
		root, err := findUp(cwd, "cdk.json")
		if err != nil {
			errs = append(errs, err)
		}
		p.AssetRoot = filepath.Join(root, "dist")
	} else if !filepath.IsAbs(p.AssetRoot) {
		p.AssetRoot = filepath.Join(cwd, p.AssetRoot)
	}
	p.AuthMode = stack.AuthMode(strings.ToUpper(str(ctxAuthMode)))
	p.EventSource = str(ctxEventSource)
	p.Destroy = boolean(ctxDestroy, false)
	p.Outbox.BatchSize = integer(ctxBatchSize)
	p.Outbox.MaxBatchingWindow = time.Duration(integer(ctxBatchingWindow)) * time.Second
	p.Outbox.PendingShards = integer(ctxPendingShards)
	p.Outbox.ReconcileRate = time.Duration(integer(ctxReconcileRate)) * time.Minute
	return cfg, errors.Join(errs...)
}

// findUp returns the nearest directory at or above dir that contains name.
func findUp(dir, name string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s found at or above %s; set -c %s=<dir>", name, dir, ctxAssetRoot)
		}
	}
}
