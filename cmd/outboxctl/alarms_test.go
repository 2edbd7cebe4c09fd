package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/operator/alarmfake"
)

// TestAlarmsTest: outboxctl alarms test fires the stack's first alarm in OK
// (-prefix) or a named one (-alarm) through CloudWatch (here the fake, which
// keeps CloudWatch's rules), prints the SNS action's result and that the
// alarm is back in OK; a topic that refuses CloudWatch is a failure naming
// AWS's text and the policy to fix; the local stack (-endpoint) is refused
// with the reason, and the subcommand and a target are required.
func TestAlarmsTest(t *testing.T) {
	for _, v := range append([]string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", envStackName}, endpointVars...) {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	const topic = "arn:aws:sns:eu-west-1:123456789012:DdbOutbox-AlarmTopic"
	var fake *alarmfake.Fake
	saved := alarmsAPI
	alarmsAPI = func(clients) operator.AlarmsAPI { return fake }
	t.Cleanup(func() { alarmsAPI = saved })
	ctl := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		return out.String(), err
	}
	reset := func() {
		fake = alarmfake.New(time.Now,
			alarmfake.Alarm{Name: "DdbOutbox-ApiErrorsAlarm", AlarmActions: []string{topic}, OKActions: []string{topic}},
			alarmfake.Alarm{Name: "DdbOutbox-RelayErrorsAlarm", AlarmActions: []string{topic}, OKActions: []string{topic}})
	}

	reset()
	out, err := ctl("-region", "eu-west-1", "alarms", "test", "-prefix", "DdbOutbox", "-poll", "10ms", "-wait", "5s")
	if err != nil {
		t.Fatalf("alarms test: %v\n%s", err, out)
	}
	mustContain(t, "alarms test", out, "alarm DdbOutbox-ApiErrorsAlarm set to ALARM", "ok\t"+topic, "Successfully executed action", "set back to OK", "notified its 1 SNS topic(s)")

	reset()
	fake.RefusePublish(topic)
	out, err = ctl("-region", "eu-west-1", "alarms", "test", "-alarm", "DdbOutbox-RelayErrorsAlarm", "-poll", "10ms", "-wait", "5s")
	if !errors.Is(err, operator.ErrAlarmNotNotified) || !strings.Contains(err.Error(), "cloudwatch.amazonaws.com") {
		t.Fatalf("refused topic: err = %v, want ErrAlarmNotNotified naming the policy to fix", err)
	}
	mustContain(t, "refused topic", out, "FAILED\t"+topic, "is not authorized to perform: SNS:Publish", "DdbOutbox-RelayErrorsAlarm set back to OK")

	if _, err := ctl("-endpoint", "http://127.0.0.1:4580", "alarms", "test", "-prefix", "DdbOutbox"); !errors.Is(err, errLocalAlarms) {
		t.Errorf("local target: err = %v, want errLocalAlarms", err)
	}
	for _, args := range [][]string{{"alarms"}, {"alarms", "fire"}, {"-region", "eu-west-1", "alarms", "test"}} {
		if _, err := ctl(args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}
