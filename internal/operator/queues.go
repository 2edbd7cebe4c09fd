package operator

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// QueueAPI is the SQS subset status reads with, with the SDK's exact
// signatures.
type QueueAPI interface {
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ListQueues(ctx context.Context, params *sqs.ListQueuesInput, optFns ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
}

// Queue kinds, as status prints them.
const (
	KindParked        = "parked-records"  // the relay's parked-records DLQ (PARKED_QUEUE_URL)
	KindStreamFailure = "stream-failures" // the stream event source mapping's on-failure destination
	KindConsumerDLQ   = "consumer-dlq"    // a consumer's DLQ
	KindRuleDLQ       = "rule-dlq"        // a routing rule's DLQ: what EventBridge could not deliver to a consumer queue
	KindConsumerQueue = "consumer-queue"  // a consumer's queue
)

// QueueRef names one queue whose depth status reports.
type QueueRef struct {
	Kind string
	URL  string
}

// QueueDepth is a queue's approximate depth (GetQueueAttributes
// ApproximateNumberOfMessages and ApproximateNumberOfMessagesNotVisible), or
// the error reading it.
type QueueDepth struct {
	Kind     string
	Name     string
	URL      string
	Visible  int
	InFlight int
	Err      error
}

// KindOf classifies a queue by the local stack's names: "-parked",
// "-onfailure", "-rule-dlq", "-dlq" suffixes; any other is a consumer
// queue.
func KindOf(name string) string {
	switch {
	case strings.HasSuffix(name, "-parked"):
		return KindParked
	case strings.HasSuffix(name, "-onfailure"):
		return KindStreamFailure
	case isRuleDLQ(name):
		return KindRuleDLQ
	case strings.HasSuffix(name, "-dlq"):
		return KindConsumerDLQ
	}
	return KindConsumerQueue
}

// DiscoverQueues lists the queues whose name starts with prefix
// (ListQueues, paginated) and classifies them with KindOf.
func DiscoverQueues(ctx context.Context, q QueueAPI, prefix string) ([]QueueRef, error) {
	var refs []QueueRef
	p := sqs.NewListQueuesPaginator(q, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return refs, fmt.Errorf("list queues %q: %w", prefix, err)
		}
		for _, u := range page.QueueUrls {
			refs = append(refs, QueueRef{Kind: KindOf(path.Base(u)), URL: u})
		}
	}
	return refs, nil
}

// Depths reads each queue's depth; a failed read is kept in its Err.
func Depths(ctx context.Context, q QueueAPI, refs []QueueRef) []QueueDepth {
	out := make([]QueueDepth, 0, len(refs))
	for _, r := range refs {
		d := QueueDepth{Kind: r.Kind, Name: path.Base(r.URL), URL: r.URL}
		res, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.URL), AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			d.Err = fmt.Errorf("depth of %s: %w", r.URL, err)
		} else {
			d.Visible, _ = strconv.Atoi(res.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
			d.InFlight, _ = strconv.Atoi(res.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
		}
		out = append(out, d)
	}
	return out
}
