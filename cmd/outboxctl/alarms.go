package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
)

// alarmsAPI returns the CloudWatch client of c (tests put a fake here).
var alarmsAPI = func(c clients) operator.AlarmsAPI { return c.cw }

// errLocalAlarms: the local stack serves no CloudWatch.
var errLocalAlarms = errors.New("alarms test: the local stack has no CloudWatch alarms (make dev serves DynamoDB, SQS and EventBridge only); run it against the deployed stack, without -endpoint")

// runAlarms runs `outboxctl alarms test`: it fires one of the stack's
// alarms (operator.CheckAlarmNotifies) and prints whether its SNS action
// succeeded, with AWS's failure text when not; the alarm is set back to OK.
func runAlarms(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("alarms")
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		return parse(fs, args[:1]) // flag.ErrHelp after printing the help
	}
	if len(args) == 0 || args[0] != "test" {
		return usageErr("alarms: the subcommand is test (outboxctl alarms test -prefix <stack name>)")
	}
	name := fs.String("alarm", "", "the alarm's exact name (in state OK or INSUFFICIENT_DATA)")
	prefix := fs.String("prefix", os.Getenv(envStackName), "the first alarm in OK, by name, whose name starts with this (a stack's alarms start with its name; default $"+envStackName+")")
	reason := fs.String("reason", "", "the StateReason of the test (default: outboxctl alarms test at <time>)")
	wait := fs.Duration("wait", operator.DefaultAlarmCheckTimeout, "how long to wait for the SNS action's result in the alarm's history")
	poll := fs.Duration("poll", operator.DefaultAlarmCheckPoll, "how often to read the alarm's history")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *name != "" {
		*prefix = "" // an exact name wins over the default prefix
	}
	if *name == "" && *prefix == "" {
		return usageErr("alarms test: give -alarm NAME or -prefix STACK_NAME")
	}
	if e.target.localTarget() {
		return errLocalAlarms
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	res, err := operator.CheckAlarmNotifies(ctx, alarmsAPI(c), operator.AlarmCheckOptions{
		Name: *name, Prefix: *prefix, Reason: *reason, Timeout: *wait, Poll: *poll,
	})
	if res.Alarm != "" {
		fmt.Fprintf(e.out, "alarm %s set to ALARM (reason %q)\n", res.Alarm, res.Reason)
		for _, a := range res.Actions {
			switch a.State {
			case operator.ActionSucceeded:
				fmt.Fprintf(e.out, "ok\t%s\t%s\t%s\n", a.Topic, a.At.UTC().Format(time.RFC3339), a.Summary)
			case operator.ActionFailed:
				fmt.Fprintf(e.out, "FAILED\t%s\t%s\t%s\n", a.Topic, a.At.UTC().Format(time.RFC3339), a.Error)
			default:
				fmt.Fprintf(e.out, "NO RESULT\t%s\tnothing in the alarm's history within %s\n", a.Topic, *wait)
			}
		}
		if res.ResetErr != nil {
			fmt.Fprintf(e.out, "alarm %s NOT set back to OK: %v (it returns to its actual state when its metric is evaluated)\n", res.Alarm, res.ResetErr)
		} else {
			fmt.Fprintf(e.out, "alarm %s set back to OK\n", res.Alarm)
		}
	}
	if err != nil {
		if errors.Is(err, operator.ErrAlarmNotNotified) {
			return fmt.Errorf("%w\nthe topic's policy must allow sns:Publish to cloudwatch.amazonaws.com for this account's alarms (and, if it is encrypted, its key policy kms:Decrypt and kms:GenerateDataKey*); see docs/DEPLOY.md, Alarms", err)
		}
		return err
	}
	fmt.Fprintf(e.out, "alarm %s notified its %d SNS topic(s): confirm the message reached the subscribers\n", res.Alarm, len(res.Actions))
	return nil
}

// envStackName names the deployed stack (the alarms' name prefix).
const envStackName = "OUTBOX_STACK_NAME"
