package localrt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// AWSFront is an HTTP endpoint speaking the AWS JSON protocols the Go SDK v2
// uses, backed by the in-process queues and bus of the local runtime, so
// that another process (outboxctl, the AWS CLI) reaches them with an
// ordinary SDK client whose BaseEndpoint is the front's URL and whose
// credentials are dummies (requests are not authenticated; the front is for
// a loopback address only). It serves, by X-Amz-Target:
//
//   - AmazonSQS.* (awsJson1_0, query-compatible: errors carry
//     X-Amzn-Query-Error with the SQS query error code): SendMessage,
//     ReceiveMessage, DeleteMessage, ChangeMessageVisibility,
//     GetQueueAttributes, GetQueueUrl, ListQueues, PurgeQueue;
//   - AWSEvents.PutEvents (awsJson1_1), and, when AWSFrontConfig.EventBridge
//     implements ArchiveAPI (a *Bus does), CreateArchive, DescribeArchive,
//     ListArchives, StartReplay, DescribeReplay, ListReplays, CancelReplay
//     DescribeRule and ListRules (timestamps as epoch seconds, as awsJson1_1 carries
//     them);
//   - DynamoDB_20120810.* and DynamoDBStreams_20120810.*: proxied unchanged
//     to AWSFrontConfig.DynamoDB when set, so one endpoint serves every
//     client of an operator tool.
//
// A queue is named in requests by its QueueUrl; the front matches the URL's
// last path segment (the queue name), so both the queue's own URL
// (https://sqs.us-east-1.amazonaws.com/000000000000/NAME) and
// http://HOST/000000000000/NAME work. GetQueueUrl and ListQueues answer the
// queue's own URL. A queue registered without ReceiveMessage (a MemoryQueue,
// the parked-records queue) answers receives with
// AWS.SimpleQueueService.UnsupportedOperation and its depth with
// GetQueueAttributes.
//
// Sources: Smithy awsJson1_0 / awsJson1_1 protocol specifications (error
// "__type", X-Amzn-ErrorType), the awsQueryCompatible trait
// (X-Amzn-Query-Error "Code;Sender"), the Amazon SQS and EventBridge API
// references. Safe for concurrent use.
type AWSFront struct {
	mu     sync.RWMutex
	queues map[string]FrontQueue // by queue name
	eb     PutEventsAPI
	ddb    http.Handler
	// timeout bounds one backend call (a ReceiveMessage long poll is at
	// most 20 s; the rest return at once).
	timeout time.Duration
}

// FrontQueue is a queue an AWSFront serves. SendMessage is required;
// ReceiveMessage, DeleteMessage, ChangeMessageVisibility, GetQueueAttributes
// and PurgeQueue are served when the queue has them with the SDK's
// signatures (SQSQueue has all of them), and GetQueueAttributes falls back
// to Len() int (MemoryQueue) for the depth.
type FrontQueue interface {
	MessageSender
	URL() string
}

// AWSFrontConfig configures an AWSFront.
type AWSFrontConfig struct {
	// Queues are served by name (the last path segment of URL()).
	Queues []FrontQueue
	// EventBridge receives PutEvents (a *Bus, or a wrapper of it). Nil:
	// AWSEvents targets answer UnknownOperationException.
	EventBridge PutEventsAPI
	// DynamoDB is a DynamoDB-compatible endpoint (with Streams) that
	// DynamoDB and DynamoDB Streams requests are proxied to, e.g.
	// http://127.0.0.1:8000. Empty: they answer UnknownOperationException.
	DynamoDB string
}

// NewAWSFront returns a front serving cfg's queues and bus. It returns an
// error for a queue without a URL, two queues with one name, or an invalid
// DynamoDB URL.
func NewAWSFront(cfg AWSFrontConfig) (*AWSFront, error) {
	f := &AWSFront{queues: map[string]FrontQueue{}, eb: cfg.EventBridge, timeout: MaxWaitTime + 10*time.Second}
	for _, q := range cfg.Queues {
		if err := f.AddQueue(q); err != nil {
			return nil, err
		}
	}
	if cfg.DynamoDB != "" {
		u, err := url.Parse(cfg.DynamoDB)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("localrt: AWSFrontConfig.DynamoDB %q is not an http(s) URL", cfg.DynamoDB)
		}
		f.ddb = httputil.NewSingleHostReverseProxy(u)
	}
	return f, nil
}

// AddQueue serves q under its name. It returns an error when q has no URL or
// its name is taken.
func (f *AWSFront) AddQueue(q FrontQueue) error {
	name := queueName(q.URL())
	if name == "" {
		return errors.New("localrt: AWSFront: a queue needs a URL")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.queues[name]; dup {
		return fmt.Errorf("localrt: AWSFront: two queues named %q", name)
	}
	f.queues[name] = q
	return nil
}

// queueName is the last path segment of a queue URL.
func queueName(u string) string {
	if p, err := url.Parse(u); err == nil && p.Path != "" {
		return path.Base(strings.TrimSuffix(p.Path, "/"))
	}
	return ""
}

// ServeHTTP answers one AWS JSON protocol request.
func (f *AWSFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	service, op, _ := strings.Cut(target, ".")
	switch service {
	case "DynamoDB_20120810", "DynamoDBStreams_20120810":
		if f.ddb != nil {
			f.ddb.ServeHTTP(w, r)
			return
		}
	case "AmazonSQS":
		f.serveSQS(w, r, op)
		return
	case "AWSEvents":
		if f.eb != nil && op == "PutEvents" {
			f.servePutEvents(w, r)
			return
		}
		if api, ok := f.eb.(ArchiveAPI); ok && f.serveArchive(w, r, api, op) {
			return
		}
	}
	writeAWSError(w, "1.1", http.StatusBadRequest, "UnknownOperationException", "", fmt.Sprintf("the local AWS front does not serve X-Amz-Target %q", target))
}

// writeAWSError writes an awsJson error: status, {"__type","message"},
// X-Amzn-ErrorType, and (when queryCode is set) X-Amzn-Query-Error.
func writeAWSError(w http.ResponseWriter, version string, status int, typ, queryCode, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-"+version)
	w.Header().Set("X-Amzn-ErrorType", typ)
	if queryCode != "" {
		fault := "Sender"
		if status >= 500 {
			fault = "Receiver"
		}
		w.Header().Set("X-Amzn-Query-Error", queryCode+";"+fault)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

// writeJSON writes a 200 awsJson response.
func writeJSON(w http.ResponseWriter, version string, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-"+version)
	_ = json.NewEncoder(w).Encode(v)
}

// sqsErrorTypes maps SQS query error codes to the awsJson error shape names
// the SDK models (it then sets the query code as the error's code).
var sqsErrorTypes = map[string]string{
	"AWS.SimpleQueueService.NonExistentQueue":     "QueueDoesNotExist",
	"AWS.SimpleQueueService.MessageNotInflight":   "MessageNotInflight",
	"AWS.SimpleQueueService.UnsupportedOperation": "UnsupportedOperation",
	"AWS.SimpleQueueService.PurgeQueueInProgress": "PurgeQueueInProgress",
	ErrorCodeAccessDenied:                         "AccessDeniedException",
}

// writeSQSError answers err, a smithy API error of a local queue (its code
// is the SQS query error code) or another error (InternalError).
func writeSQSError(w http.ResponseWriter, err error) {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		status := http.StatusInternalServerError
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			status = http.StatusServiceUnavailable
		}
		writeAWSError(w, "1.0", status, "InternalError", "InternalError", err.Error())
		return
	}
	code := ae.ErrorCode()
	typ, ok := sqsErrorTypes[code]
	if !ok {
		typ = strings.TrimPrefix(code, "AWS.SimpleQueueService.")
	}
	status := http.StatusBadRequest
	switch {
	case ae.ErrorFault() == smithy.FaultServer:
		status = http.StatusInternalServerError
	case code == ErrorCodeAccessDenied:
		status = http.StatusForbidden
	}
	writeAWSError(w, "1.0", status, "com.amazonaws.sqs#"+typ, code, ae.ErrorMessage())
}

func errNoQueue(u string) error {
	return &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue", Fault: smithy.FaultClient,
		Message: fmt.Sprintf("The specified queue does not exist: %q.", u)}
}

func errUnsupported(op, u string) error {
	return &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.UnsupportedOperation", Fault: smithy.FaultClient,
		Message: fmt.Sprintf("%s is not supported by the local queue %s (a send-only store)", op, u)}
}

// queue returns the queue a QueueUrl names and that queue's own URL.
func (f *AWSFront) queue(u *string) (FrontQueue, *string, error) {
	f.mu.RLock()
	q, ok := f.queues[queueName(aws.ToString(u))]
	f.mu.RUnlock()
	if !ok {
		return nil, nil, errNoQueue(aws.ToString(u))
	}
	return q, aws.String(q.URL()), nil
}

// sqsMessageJSON is a message in a ReceiveMessage answer.
type sqsMessageJSON struct {
	MessageID         string                                    `json:"MessageId,omitempty"`
	ReceiptHandle     string                                    `json:"ReceiptHandle,omitempty"`
	MD5OfBody         string                                    `json:"MD5OfBody,omitempty"`
	Body              string                                    `json:"Body,omitempty"`
	Attributes        map[string]string                         `json:"Attributes,omitempty"`
	MessageAttributes map[string]sqstypes.MessageAttributeValue `json:"MessageAttributes,omitempty"`
}

type (
	receiver interface {
		ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	}
	deleter interface {
		DeleteMessage(ctx context.Context, params *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	}
	visibilityChanger interface {
		ChangeMessageVisibility(ctx context.Context, params *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	}
	attributer interface {
		GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	}
	purger interface {
		PurgeQueue(ctx context.Context, params *sqs.PurgeQueueInput, optFns ...func(*sqs.Options)) (*sqs.PurgeQueueOutput, error)
	}
	lengther interface{ Len() int }
)

// maxRequestBytes bounds a request body the front reads (4 MiB: above
// PutEvents' 1 MiB request limit and SQS's 1 MiB message limit, so what
// AWS accepts fits, and the service's own checks answer the rest).
const maxRequestBytes = 4 << 20

// readRequestBody reads r's body, or fails with a clear error when it is
// longer than maxRequestBytes (never a silently cut body that then reads as
// malformed JSON).
func readRequestBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxRequestBytes {
		return nil, fmt.Errorf("request body longer than %d bytes", maxRequestBytes)
	}
	return body, nil
}

// writeEventsError answers an EventBridge operation's error as awsJson1_1
// does: an API error with its code (400, or 500 for a server fault), any
// other error as an InternalException (500).
func writeEventsError(w http.ResponseWriter, err error) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		status := http.StatusBadRequest
		if ae.ErrorFault() == smithy.FaultServer {
			status = http.StatusInternalServerError
		}
		writeAWSError(w, "1.1", status, ae.ErrorCode(), "", ae.ErrorMessage())
		return
	}
	writeAWSError(w, "1.1", http.StatusInternalServerError, "InternalException", "", err.Error())
}

// serveSQS answers one AmazonSQS.* operation.
func (f *AWSFront) serveSQS(w http.ResponseWriter, r *http.Request, op string) {
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	body, err := readRequestBody(r)
	if err != nil {
		writeSQSError(w, errMalformed(err))
		return
	}
	if len(body) == 0 {
		body = []byte("{}")
	}
	var out any
	switch op {
	case "SendMessage":
		out, err = queueCall(f, op, body, func(in *sqs.SendMessageInput) **string { return &in.QueueUrl },
			func(q MessageSender, in *sqs.SendMessageInput) (any, error) {
				res, err := q.SendMessage(ctx, in)
				if err != nil {
					return nil, err
				}
				return map[string]string{"MessageId": aws.ToString(res.MessageId), "MD5OfMessageBody": aws.ToString(res.MD5OfMessageBody)}, nil
			})
	case "ReceiveMessage":
		out, err = queueCall(f, op, body, func(in *sqs.ReceiveMessageInput) **string { return &in.QueueUrl },
			func(q receiver, in *sqs.ReceiveMessageInput) (any, error) {
				res, err := q.ReceiveMessage(ctx, in)
				if err != nil {
					return nil, err
				}
				msgs := make([]sqsMessageJSON, 0, len(res.Messages))
				for _, m := range res.Messages {
					msgs = append(msgs, sqsMessageJSON{
						MessageID: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
						MD5OfBody: aws.ToString(m.MD5OfBody), Body: aws.ToString(m.Body),
						Attributes: m.Attributes, MessageAttributes: m.MessageAttributes,
					})
				}
				return map[string]any{"Messages": msgs}, nil
			})
	case "DeleteMessage":
		out, err = queueCall(f, op, body, func(in *sqs.DeleteMessageInput) **string { return &in.QueueUrl },
			func(q deleter, in *sqs.DeleteMessageInput) (any, error) {
				_, err := q.DeleteMessage(ctx, in)
				return struct{}{}, err
			})
	case "ChangeMessageVisibility":
		out, err = queueCall(f, op, body, func(in *sqs.ChangeMessageVisibilityInput) **string { return &in.QueueUrl },
			func(q visibilityChanger, in *sqs.ChangeMessageVisibilityInput) (any, error) {
				_, err := q.ChangeMessageVisibility(ctx, in)
				return struct{}{}, err
			})
	case "PurgeQueue":
		out, err = queueCall(f, op, body, func(in *sqs.PurgeQueueInput) **string { return &in.QueueUrl },
			func(q purger, in *sqs.PurgeQueueInput) (any, error) {
				_, err := q.PurgeQueue(ctx, in)
				return struct{}{}, err
			})
	case "GetQueueAttributes":
		out, err = queueCall(f, op, body, func(in *sqs.GetQueueAttributesInput) **string { return &in.QueueUrl },
			func(q FrontQueue, in *sqs.GetQueueAttributesInput) (any, error) {
				attrs, err := queueAttributes(ctx, q, in.QueueUrl)
				if err != nil {
					return nil, err
				}
				return map[string]any{"Attributes": selectAttributes(attrs, in.AttributeNames)}, nil
			})
	case "GetQueueUrl":
		var in sqs.GetQueueUrlInput
		if err = json.Unmarshal(body, &in); err != nil {
			err = errMalformed(err)
			break
		}
		f.mu.RLock()
		q, ok := f.queues[aws.ToString(in.QueueName)]
		f.mu.RUnlock()
		if !ok {
			err = errNoQueue(aws.ToString(in.QueueName))
			break
		}
		out = map[string]string{"QueueUrl": q.URL()}
	case "ListQueues":
		var in sqs.ListQueuesInput
		if err = json.Unmarshal(body, &in); err != nil {
			err = errMalformed(err)
			break
		}
		out = map[string]any{"QueueUrls": f.listQueues(aws.ToString(in.QueueNamePrefix), int(aws.ToInt32(in.MaxResults)))}
	default:
		err = &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.UnsupportedOperation", Fault: smithy.FaultClient,
			Message: fmt.Sprintf("the local AWS front does not serve AmazonSQS.%s; it serves %s", op, strings.Join(sqsOperations, ", "))}
	}
	if err != nil {
		writeSQSError(w, err)
		return
	}
	writeJSON(w, "1.0", out)
}

// sqsOperations are the AmazonSQS operations an AWSFront serves.
var sqsOperations = []string{"SendMessage", "ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility",
	"GetQueueAttributes", "GetQueueUrl", "ListQueues", "PurgeQueue"}

func errMalformed(err error) error {
	return &smithy.GenericAPIError{Code: "InvalidParameterValue", Fault: smithy.FaultClient, Message: "malformed request body: " + err.Error()}
}

// queueCall decodes an In from body, finds the queue its QueueUrl (the
// field queueURL points to) names, rewrites that QueueUrl to the queue's
// own URL, and runs do when the queue implements Q; otherwise it returns
// UnsupportedOperation.
func queueCall[Q any, In any](f *AWSFront, op string, body []byte, queueURL func(*In) **string, do func(Q, *In) (any, error)) (any, error) {
	in := new(In)
	if err := json.Unmarshal(body, in); err != nil {
		return nil, errMalformed(err)
	}
	p := queueURL(in)
	q, u, err := f.queue(*p)
	if err != nil {
		return nil, err
	}
	impl, ok := any(q).(Q)
	if !ok {
		return nil, errUnsupported(op, aws.ToString(u))
	}
	*p = u
	return do(impl, in)
}

// listQueues returns the URLs of the queues whose name starts with prefix,
// sorted by name, at most limit (0: 1,000, the ListQueues maximum).
func (f *AWSFront) listQueues(prefix string, limit int) []string {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	names := make([]string, 0, len(f.queues))
	for n := range f.queues {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	urls := []string{}
	for _, n := range names[:min(limit, len(names))] {
		urls = append(urls, f.queues[n].URL())
	}
	return urls
}

// queueAttributes returns every attribute the queue answers: an SQSQueue's
// own GetQueueAttributes, or the depth of a queue with Len (every stored
// message counts as visible: a MemoryQueue never hides one).
func queueAttributes(ctx context.Context, q FrontQueue, u *string) (map[string]string, error) {
	if aq, ok := q.(attributer); ok {
		res, err := aq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
		if err != nil {
			return nil, err
		}
		return res.Attributes, nil
	}
	if lq, ok := q.(lengther); ok {
		return map[string]string{
			"ApproximateNumberOfMessages":           strconv.Itoa(lq.Len()),
			"ApproximateNumberOfMessagesNotVisible": "0",
			"ApproximateNumberOfMessagesDelayed":    "0",
		}, nil
	}
	return nil, errUnsupported("GetQueueAttributes", aws.ToString(u))
}

// selectAttributes keeps the asked-for attributes ("All" or none: every one).
func selectAttributes(attrs map[string]string, names []sqstypes.QueueAttributeName) map[string]string {
	if len(names) == 0 {
		return attrs
	}
	out := map[string]string{}
	for _, n := range names {
		if n == sqstypes.QueueAttributeNameAll {
			return attrs
		}
		if v, ok := attrs[string(n)]; ok {
			out[string(n)] = v
		}
	}
	return out
}

// putEventsEntryJSON is a PutEvents request entry as awsJson1_1 carries it:
// Time is a timestamp in epoch seconds (a JSON number, maybe fractional).
type putEventsEntryJSON struct {
	Source       *string
	DetailType   *string
	Detail       *string
	EventBusName *string
	Resources    []string
	Time         *json.Number
	TraceHeader  *string
}

// servePutEvents answers AWSEvents.PutEvents through the configured bus.
func (f *AWSFront) servePutEvents(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	var in struct{ Entries []putEventsEntryJSON }
	body, err := readRequestBody(r)
	if err != nil {
		writeAWSError(w, "1.1", http.StatusRequestEntityTooLarge, "ValidationException", "", err.Error())
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		writeAWSError(w, "1.1", http.StatusBadRequest, "ValidationException", "", "malformed request body: "+err.Error())
		return
	}
	params := &eventbridge.PutEventsInput{}
	if in.Entries != nil { // "Entries":[] is an empty list, not a missing one
		params.Entries = make([]ebtypes.PutEventsRequestEntry, 0, len(in.Entries))
	}
	for _, e := range in.Entries {
		entry := ebtypes.PutEventsRequestEntry{Source: e.Source, DetailType: e.DetailType, Detail: e.Detail,
			EventBusName: e.EventBusName, Resources: e.Resources, TraceHeader: e.TraceHeader}
		if e.Time != nil {
			secs, err := e.Time.Float64()
			if err != nil {
				writeAWSError(w, "1.1", http.StatusBadRequest, "ValidationException", "", "Time is not a number of epoch seconds")
				return
			}
			whole, frac := math.Modf(secs)
			entry.Time = aws.Time(time.Unix(int64(whole), int64(frac*1e9)).UTC())
		}
		params.Entries = append(params.Entries, entry)
	}
	res, err := f.eb.PutEvents(ctx, params)
	if err != nil {
		writeEventsError(w, err)
		return
	}
	type resultEntry struct {
		EventID      string `json:"EventId,omitempty"`
		ErrorCode    string `json:"ErrorCode,omitempty"`
		ErrorMessage string `json:"ErrorMessage,omitempty"`
	}
	entries := make([]resultEntry, 0, len(res.Entries))
	for _, e := range res.Entries {
		entries = append(entries, resultEntry{EventID: aws.ToString(e.EventId), ErrorCode: aws.ToString(e.ErrorCode), ErrorMessage: aws.ToString(e.ErrorMessage)})
	}
	writeJSON(w, "1.1", map[string]any{"FailedEntryCount": res.FailedEntryCount, "Entries": entries})
}
