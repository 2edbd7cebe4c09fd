package wallet

import (
	"context"
	"fmt"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Command is the accounts function's input: one command on one account
// (a Lambda invocation's JSON payload).
type Command struct {
	// Op is "open", "deposit" or "withdraw".
	Op        string `json:"op"`
	AccountID string `json:"account_id"`
	// Owner and Currency, for "open".
	Owner    string `json:"owner,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Amount in minor units, for "deposit" and "withdraw".
	Amount int64 `json:"amount,omitempty"`
	// CorrelationID goes onto the event (outbox.Metadata).
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Result is the accounts function's answer: the account's version after
// the command, which is the sequence of the event it recorded.
type Result struct {
	AccountID string `json:"account_id"`
	Version   int64  `json:"version"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
}

// Handle runs one command. Its errors are the Service's (ErrInvalidCommand
// for an unknown Op).
func (s *Service) Handle(ctx context.Context, c Command) (Result, error) {
	md := outbox.Metadata{CorrelationID: c.CorrelationID}
	var res outbox.UpdateResult
	var err error
	switch c.Op {
	case "open":
		res, err = s.Open(ctx, c.AccountID, c.Owner, c.Currency, md)
	case "deposit":
		res, err = s.Deposit(ctx, c.AccountID, c.Amount, md)
	case "withdraw":
		res, err = s.Withdraw(ctx, c.AccountID, c.Amount, md)
	default:
		return Result{}, fmt.Errorf("%w: op %q is not open, deposit or withdraw", ErrInvalidCommand, c.Op)
	}
	if err != nil {
		return Result{}, err
	}
	last := res.Events[len(res.Events)-1]
	return Result{AccountID: c.AccountID, Version: res.Version, EventID: last.EventID, EventType: last.EventType}, nil
}
