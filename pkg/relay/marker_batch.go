package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// MaxStatementsPerBatch is the BatchExecuteStatement limit on statements
// per call. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchExecuteStatement.html
const MaxStatementsPerBatch = 25

// StatementError is the error MarkAll returns for a published mark whose
// BatchExecuteStatement statement failed with a code that is neither
// ConditionalCheckFailed nor retryable (e.g. ValidationError,
// ItemCollectionSizeLimitExceeded, ResourceNotFound). The record stays
// pending.
type StatementError struct {
	// Code and Message are the statement's BatchStatementError.
	Code    string
	Message string
}

// Error returns "BatchExecuteStatement statement failed: <code>: <message>".
func (e *StatementError) Error() string {
	return fmt.Sprintf("BatchExecuteStatement statement failed: %s: %s", e.Code, e.Message)
}

// retryableStatementCodes are the BatchStatementError codes retried with
// UpdateItem. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchStatementError.html
var retryableStatementCodes = map[ddbtypes.BatchStatementErrorCodeEnum]bool{
	ddbtypes.BatchStatementErrorCodeEnumThrottlingError:               true,
	ddbtypes.BatchStatementErrorCodeEnumProvisionedThroughputExceeded: true,
	ddbtypes.BatchStatementErrorCodeEnumTransactionConflict:           true,
	ddbtypes.BatchStatementErrorCodeEnumInternalServerError:           true,
	ddbtypes.BatchStatementErrorCodeEnumRequestLimitExceeded:          true,
}

// publishedStatement returns the PartiQL UPDATE of a published mark.
// Parameters, in order: status, published_at, expires_at, bus_event_id, pk,
// sk, and the status it must not have (PUBLISHED). The status predicate in
// the WHERE clause acts as a condition: a record already PUBLISHED fails the
// statement with ConditionalCheckFailed and keeps its details.
func publishedStatement(table string) string {
	return fmt.Sprintf("UPDATE %s SET %s=?, %s=?, %s=?, %s=? REMOVE %s WHERE %s=? AND %s=? AND %s<>?",
		quoteIdent(table), quoteIdent(outbox.AttrStatus), quoteIdent(outbox.AttrPublishedAt),
		quoteIdent(outbox.AttrExpiresAt), quoteIdent(outbox.AttrBusEventID), quoteIdent(outbox.AttrPendingShard),
		quoteIdent(outbox.AttrPK), quoteIdent(outbox.AttrSK), quoteIdent(outbox.AttrStatus))
}

// quoteIdent quotes a PartiQL identifier (double quotes, inner quotes doubled).
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// markBatch marks the published marks at idx with one BatchExecuteStatement
// call, sets errs for marks that failed for good, and returns the indexes
// to retry with UpdateItem. Only this goroutine writes errs[idx...].
func (m *Marker) markBatch(ctx context.Context, marks []Mark, idx []int, errs []error) (fallback []int) {
	if ctx.Err() != nil {
		return idx // MarkPublished reports the context error per mark
	}
	now := m.cfg.Now().UTC()
	publishedAt := &ddbtypes.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)}
	expiresAt := &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(m.cfg.PublishedRetention).Unix(), 10)}
	status := &ddbtypes.AttributeValueMemberS{Value: outbox.StatusPublished}
	in := &dynamodb.BatchExecuteStatementInput{Statements: make([]ddbtypes.BatchStatementRequest, len(idx))}
	for j, i := range idx {
		mk := marks[i]
		in.Statements[j] = ddbtypes.BatchStatementRequest{
			Statement: aws.String(m.stmt),
			Parameters: []ddbtypes.AttributeValue{
				status, publishedAt, expiresAt,
				&ddbtypes.AttributeValueMemberS{Value: mk.Result.EventID},
				&ddbtypes.AttributeValueMemberS{Value: mk.Key.PK},
				&ddbtypes.AttributeValueMemberS{Value: mk.Key.SK},
				status,
			},
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	out, err := m.batch.BatchExecuteStatement(callCtx, in)
	cancel()
	if err != nil {
		if code, ok := batchUnsupported(err); ok {
			if m.noBatch.CompareAndSwap(false, true) {
				m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement unusable, marking with UpdateItem from now on",
					"error_code", code, "error", err)
			}
		} else {
			m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement failed, marking this chunk with UpdateItem",
				"statements", len(idx), "error", err)
		}
		return idx
	}
	if out == nil || len(out.Responses) != len(idx) {
		n := 0
		if out != nil {
			n = len(out.Responses)
		}
		m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement returned a result count that does not match, marking this chunk with UpdateItem",
			"statements", len(idx), "responses", n)
		return idx
	}
	for j, i := range idx {
		mk := marks[i]
		se := out.Responses[j].Error
		switch {
		case se == nil:
			m.log(ctx, slog.LevelInfo, "relay: published", mk.Envelope, mk.Key, "bus_event_id", mk.Result.EventID)
		case se.Code == ddbtypes.BatchStatementErrorCodeEnumConditionalCheckFailed:
			m.log(ctx, slog.LevelWarn, "relay: record to mark published is already published or no longer exists; left as is", mk.Envelope, mk.Key, "bus_event_id", mk.Result.EventID)
		case retryableStatementCodes[se.Code]:
			fallback = append(fallback, i)
		case se.Code == ddbtypes.BatchStatementErrorCodeEnumAccessDenied:
			if m.noBatch.CompareAndSwap(false, true) {
				m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement statement denied (dynamodb:PartiQLUpdate missing?), marking with UpdateItem from now on",
					"error_code", string(se.Code), "error", aws.ToString(se.Message))
			}
			fallback = append(fallback, i)
		default:
			errs[i] = fmt.Errorf("mark published %s: %w", mk.Envelope.EventID, &StatementError{Code: string(se.Code), Message: aws.ToString(se.Message)})
		}
	}
	return fallback
}

// batchUnsupported reports whether a failed BatchExecuteStatement call
// means PartiQL cannot be used with this server or role, and the error code.
func batchUnsupported(err error) (string, bool) {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return "", false
	}
	switch code := apiErr.ErrorCode(); code {
	case "ValidationException", "UnknownOperationException", "AccessDeniedException":
		return code, true
	default:
		return code, false
	}
}
