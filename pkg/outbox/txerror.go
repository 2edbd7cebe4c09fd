package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

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
	ReasonItemCollectionSize     = "ItemCollectionSizeLimitExceeded"
)

// CancellationReasons lists every cancellation reason code DynamoDB
// documents, in the order of the API reference.
var CancellationReasons = []string{
	ReasonNone, ReasonConditionalCheckFailed, ReasonItemCollectionSize, ReasonTransactionConflict,
	ReasonProvisionedThroughput, ReasonThrottling, ReasonValidation,
}

// TxError is a cancelled TransactWriteItems call with its cancellation
// reasons translated: Reasons[i] is the code for action i ("None" where the
// action was fine). It is the one place TransactionCanceledException is read.
//
// The classes every caller maps to its outcome, strongest first (a caller
// first checks the conditions that prove its work was already done, such as
// a dedup marker or an idempotency record):
//
//   - Invalid: some action has ValidationError. Repeating cannot succeed.
//   - CollectionFull: some action has ItemCollectionSizeLimitExceeded (a
//     partition key's item collection reached 10 GB; tables with local
//     secondary indexes only). Repeating cannot succeed until an operator
//     acts.
//   - ConditionFailed(i): action i failed its condition; what that means
//     depends on the action (FirstConditionFailed).
//   - Retryable: none of the above; the rest are TransactionConflict,
//     ThrottlingError, ProvisionedThroughputExceeded, None, or codes this
//     package does not know. Repeating the identical transaction may
//     succeed. Throttled tells throttling (retry later: HTTP 503) from
//     conflicts alone (contention: HTTP 409).
//
// In multi-Region mode a Writer turns a cancellation whose home action
// (fence.go) failed its condition into a *NotHomeError instead, here in
// translateTxError: the refusal is final, not a condition to retry.
type TxError struct {
	Reasons []string
	// Items are the stored items of the actions whose condition failed,
	// as DynamoDB returns them for actions sent with
	// ReturnValuesOnConditionCheckFailure ALL_OLD (CancellationReason.Item);
	// Items[i] is nil for other actions, and Items is nil when DynamoDB
	// returned no reason list. Read it with Item.
	Items []map[string]types.AttributeValue
	Err   error
}

// Item returns the stored item DynamoDB returned for action i (sent with
// ReturnValuesOnConditionCheckFailure ALL_OLD and failed its condition),
// or nil.
func (e *TxError) Item(i int) map[string]types.AttributeValue {
	if i < 0 || i >= len(e.Items) {
		return nil
	}
	return e.Items[i]
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

// Has reports whether any action was cancelled with one of codes.
func (e *TxError) Has(codes ...string) bool {
	for _, r := range e.Reasons {
		for _, c := range codes {
			if r == c {
				return true
			}
		}
	}
	return false
}

// Invalid reports whether some action has ValidationError.
func (e *TxError) Invalid() bool { return e.Has(ReasonValidation) }

// CollectionFull reports whether some action has
// ItemCollectionSizeLimitExceeded.
func (e *TxError) CollectionFull() bool { return e.Has(ReasonItemCollectionSize) }

// Throttled reports whether some action has ThrottlingError or
// ProvisionedThroughputExceeded.
func (e *TxError) Throttled() bool { return e.Has(ReasonThrottling, ReasonProvisionedThroughput) }

// Retryable reports whether repeating the identical transaction may
// succeed: no condition failed and no action has ValidationError or
// ItemCollectionSizeLimitExceeded. Conflicts, throttling, and reasons this
// package does not know (or none at all) are retryable: a cancelled
// transaction wrote nothing, so repeating it is safe.
func (e *TxError) Retryable() bool {
	return e.FirstConditionFailed() < 0 && !e.Invalid() && !e.CollectionFull()
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

// translateTxError is TranslateTxError for the Writer's own transactions:
// when one of homes (the transaction's home actions) failed its condition
// and its stored item names another Region or none, the result is that
// aggregate's *NotHomeError (notHome).
func translateTxError(err error, homes ...homeAction) error {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return err
	}
	reasons := make([]string, len(tce.CancellationReasons))
	var items []map[string]types.AttributeValue
	for i, r := range tce.CancellationReasons {
		reasons[i] = aws.ToString(r.Code)
		if len(r.Item) > 0 {
			if items == nil {
				items = make([]map[string]types.AttributeValue, len(tce.CancellationReasons))
			}
			items[i] = r.Item
		}
	}
	if len(reasons) == 0 {
		// Older SDKs and some emulators put the list only in the message:
		// "Transaction cancelled, please refer cancellation reasons for
		// specific reasons [None, ConditionalCheckFailed]".
		reasons = reasonsFromMessage(tce.ErrorMessage())
	}
	for i, r := range reasons {
		switch r {
		case "", "NONE": // absent, older spelling
			reasons[i] = ReasonNone
		}
	}
	te := &TxError{Reasons: reasons, Items: items, Err: err}
	if nh := notHome(te, homes); nh != nil {
		return nh
	}
	return te
}

// reasonsFromMessage returns the codes listed in the last [...] of a
// TransactionCanceledException message, or nil.
func reasonsFromMessage(msg string) []string {
	open, end := strings.LastIndexByte(msg, '['), strings.LastIndexByte(msg, ']')
	if open < 0 || end < open {
		return nil
	}
	var out []string
	for _, part := range strings.Split(msg[open+1:end], ",") {
		out = append(out, strings.TrimSpace(part))
	}
	return out
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
