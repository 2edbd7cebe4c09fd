package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

func runRuleDLQRedrive(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("rule-dlq-redrive")
	dlq := fs.String("dlq", "", "the routing rule's DLQ: URL or queue name (stack output <Rule>RuleDlqUrl; make dev: <prefix>-<rule>-rule-dlq)")
	queue := fs.String("queue", "", "the consumer queue, the rule's target, to send the events back to: URL or queue name")
	rule := fs.String("rule", "", "the rule: its ARN, or its name on -bus (stack output <Rule>RuleArn)")
	bus := fs.String("bus", os.Getenv(config.EnvEventBusName), "with a rule name: its event bus (default $"+config.EnvEventBusName+")")
	source := fs.String("source", config.String(config.EnvEventSource, appenv.EventSource), "the Source the outbox publishes with: a message whose event has another is left (default $"+config.EnvEventSource+" or "+appenv.EventSource+")")
	maxMsgs := fs.Int("max", 0, "move at most this many messages (0: all); with -dry-run list at most this many (0: 1000)")
	dryRun := fs.Bool("dry-run", false, "list what would be moved and what would be left (and why); move nothing")
	unrestricted := fs.Bool("unrestricted-dlq", false, "move on the messages' attributes alone even when the DLQ's policy lets others than the rule send (then anyone allowed to send could have forged them)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dlq == "" || *queue == "" || *rule == "" {
		return usageErr("rule-dlq-redrive: -dlq, -queue and -rule are required")
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	du, err := queueURL(ctx, c, *dlq)
	if err != nil {
		return err
	}
	qu, err := queueURL(ctx, c, *queue)
	if err != nil {
		return err
	}
	ruleARN, _, err := operator.ResolveRule(ctx, c.eb, *rule, *bus)
	if err != nil {
		return fmt.Errorf("rule-dlq-redrive: %w", err)
	}
	return ruleDLQRedrive(ctx, e.out, c.sqs, operator.RuleDLQRedrive{DLQURL: du, QueueURL: qu, RuleARN: ruleARN, Source: *source,
		Max: *maxMsgs, DryRun: *dryRun, AllowUnrestrictedDLQ: *unrestricted})
}

// ruleDLQRedrive runs operator.RedriveRuleDLQ and prints, as it goes, one
// line per message moved ("redriven", or "would redrive" in a dry run:
// message id, the event, error code, the rule it names and its sender,
// error message) and per message left ("left": message id, reason, where
// from, why), then a count.
func ruleDLQRedrive(ctx context.Context, w io.Writer, q operator.RuleDLQAPI, r operator.RuleDLQRedrive) error {
	verb := "redriven"
	if r.DryRun {
		verb = "would redrive"
	}
	r.OnMessage = dlqLine(w, verb)
	r.OnLeft = func(l sqsconsumer.LeftMessage) {
		fmt.Fprintf(w, "left\t%s\t%s\t%s\t%s\n", l.MessageID, l.Reason, l.From(), l.Why)
	}
	fmt.Fprintf(w, "rule DLQ %s of rule %s → queue %s (source %s)\n", r.DLQURL, r.RuleARN, r.QueueURL, r.Source)
	r.OnChecked = func(res operator.RuleDLQResult) {
		if res.PolicyErr != nil {
			fmt.Fprintf(w, "warning: %v; moving on the messages' attributes alone (-unrestricted-dlq)\n", res.PolicyErr)
			return
		}
		fmt.Fprintf(w, "the DLQ's policy admits only the rule as sender; a message moves when it names the rule and the queue %s\n", res.TargetARN)
	}
	res, err := operator.RedriveRuleDLQ(ctx, q, q, r)
	if errors.Is(err, operator.ErrRuleDLQNotRestricted) {
		fmt.Fprintf(w, "nothing moved: the DLQ's policy does not refuse senders other than the rule, so RULE_ARN and TARGET_ARN prove nothing (the stack's rule DLQs deny sqs:SendMessage to every request whose aws:SourceArn is not the rule; -unrestricted-dlq moves on the attributes alone)\n")
		return err
	}
	if r.DryRun {
		fmt.Fprintf(w, "dry run: %d message(s) would be redriven from %s to %s; %d would be left on the DLQ; nothing moved\n", res.Moved, r.DLQURL, r.QueueURL, len(res.Left))
		return err
	}
	fmt.Fprintf(w, "%d message(s) redriven from %s to %s; %d left on the DLQ\n", res.Moved, r.DLQURL, r.QueueURL, len(res.Left))
	return err
}
