package outside

import (
	"errors"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

func TestDeposited(t *testing.T) {
	env, err := Deposited("acct-1", 3, 1250)
	if err != nil {
		t.Fatal(err)
	}
	if env.AggregateType != "Account" || env.AggregateID != "acct-1" || env.Sequence != 3 ||
		env.EventType != "AmountDeposited" || env.EventVersion != 1 || env.EventID == "" {
		t.Fatalf("envelope = %+v", env)
	}
	if _, err := Deposited("", 1, 1); !errors.Is(err, outbox.ErrInvalidEnvelope) {
		t.Fatalf("no account id: err = %v, want ErrInvalidEnvelope", err)
	}
}

func TestRequests(t *testing.T) {
	got := Requests([]int{100, 100, 100}, 200)
	if len(got) != 2 || got[0] != [2]int{0, 2} || got[1] != [2]int{2, 3} {
		t.Fatalf("Requests = %v", got)
	}
}
