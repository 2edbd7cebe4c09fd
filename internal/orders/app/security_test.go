package app

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// GIVEN the environment the CDK stack sets (EXPECTED_EVENT_ACCOUNT,
// API_CALLER_MODE)
// WHEN Settings are read
// THEN both reach Settings; unset, the account is empty and the mode auto.
func TestSettingsFromEnvReadsAccountAndCallerMode(t *testing.T) {
	s, err := SettingsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpectedAccount != "" || s.APICallerMode != appenv.APICallerModeAuto {
		t.Errorf("defaults: ExpectedAccount %q, APICallerMode %q", s.ExpectedAccount, s.APICallerMode)
	}
	t.Setenv(config.EnvExpectedEventAccount, "123456789012")
	t.Setenv(appenv.EnvAPICallerMode, appenv.APICallerModeOpenDemo)
	if s, err = SettingsFromEnv(); err != nil {
		t.Fatal(err)
	}
	if s.ExpectedAccount != "123456789012" || s.APICallerMode != appenv.APICallerModeOpenDemo {
		t.Errorf("ExpectedAccount %q, APICallerMode %q", s.ExpectedAccount, s.APICallerMode)
	}
}

func TestCallerMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want api.CallerMode
		ok   bool
	}{
		{"", api.CallersAuto, true},
		{appenv.APICallerModeAuto, api.CallersAuto, true},
		{appenv.APICallerModeIAMOnly, api.CallersIAMOnly, true},
		{appenv.APICallerModeOpenDemo, api.CallersOpenDemo, true},
		{"OPEN", 0, false},
	}
	for _, c := range cases {
		got, err := CallerMode(c.in)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("CallerMode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if !c.ok && err == nil {
			t.Errorf("CallerMode(%q) = %v, want an error", c.in, got)
		}
	}
}

// GIVEN Settings with an ExpectedAccount that is not an account id
// WHEN the consumers are built
// THEN they refuse it (dedup.NewConsumer validates ExpectedAccount), which
// shows the setting reaches dedup.ConsumerConfig; a valid id is accepted.
func TestConsumersReceiveExpectedAccount(t *testing.T) {
	ddb := dynamodb.New(dynamodb.Options{Region: "eu-west-1", Credentials: aws.AnonymousCredentials{}})
	s := Settings{LedgerTable: "l", NotificationsTable: "n"}
	for _, acct := range []string{"", "123456789012", "not-an-account"} {
		s.ExpectedAccount = acct
		_, errL := NewLedger(s, ddb, nil)
		_, errN := NewNotifier(s, ddb, nil)
		bad := acct == "not-an-account"
		if (errL != nil) != bad || (errN != nil) != bad {
			t.Errorf("ExpectedAccount %q: ledger err %v, notifier err %v", acct, errL, errN)
		}
	}
}
