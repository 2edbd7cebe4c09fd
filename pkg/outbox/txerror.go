package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Cancellation reason codes DynamoDB returns per action of a cancelled
// transaction. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
const (
	ReasonNone                   = "None"
	ReasonConditionalCheckFailed = "ConditionalCheckFailed"
	ReasonTransactionConflict    = "TransactionConflict"
	ReasonThrottling             = "ThrottlingError"
	ReasonProvisionedThroughput  = "ProvisionedThroughputExceeded"
	ReasonValidation             = "ValidationError"
)

// TxError is a cancelled TransactWriteItems call with its cancellation
// reasons translated: Reasons[i] is the code for action i ("None" where the
// action was fine). It is the one place TransactionCanceledException is read.
type TxError struct {
	Reasons []string
	Err     error
}

func (e *TxError) Error() string {
	return fmt.Sprintf("transaction cancelled %v: %v", e.Reasons, e.Err)
}

func (e *TxError) Unwrap() error { return e.Err }

// ConditionFailed reports whether action i failed its condition.
func (e *TxError) ConditionFailed(i int) bool {
	return i >= 0 && i < len(e.Reasons) && e.Reasons[i] == ReasonConditionalCheckFailed
}

// FirstConditionFailed returns the index of the first action whose
// condition failed, or -1.
func (e *TxError) FirstConditionFailed() int {
	for i, r := range e.Reasons {
		if r == ReasonConditionalCheckFailed {
			return i
		}
	}
	return -1
}

// Retryable reports whether the transaction was cancelled only by
// conflicts or throttling (no condition failed): repeating it may succeed.
func (e *TxError) Retryable() bool {
	retry := false
	for _, r := range e.Reasons {
		switch r {
		case ReasonNone, "":
		case ReasonTransactionConflict, ReasonThrottling, ReasonProvisionedThroughput:
			retry = true
		default:
			return false
		}
	}
	return retry
}

// AsTxError returns the *TxError in err's chain, if any.
func AsTxError(err error) (*TxError, bool) {
	var te *TxError
	ok := errors.As(err, &te)
	return te, ok
}

// TranslateTxError converts a *types.TransactionCanceledException into a
// *TxError; other errors are returned unchanged.
func TranslateTxError(err error) error { return translateTxError(err) }

func translateTxError(err error) error {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return err
	}
	reasons := make([]string, len(tce.CancellationReasons))
	for i, r := range tce.CancellationReasons {
		reasons[i] = aws.ToString(r.Code)
		if reasons[i] == "NONE" { // older spelling
			reasons[i] = ReasonNone
		}
	}
	return &TxError{Reasons: reasons, Err: err}
}

// RequestToken derives a deterministic TransactWriteItems ClientRequestToken
// (36 characters, the API maximum) from parts such as an idempotency key, so
// a retried request reuses the token of the first attempt.
func RequestToken(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:36]
}
