package sqsconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// memDLQ is the smallest DLQ: it prints what it is sent. In Lambda this is
// the *sqs.Client of the consumer's DLQ.
type memDLQ struct{}

func (memDLQ) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	fmt.Printf("DLQ <- %s (reason %s, from %s)\n", aws.ToString(in.MessageBody),
		aws.ToString(in.MessageAttributes[sqsconsumer.AttrReason].StringValue),
		aws.ToString(in.MessageAttributes[sqsconsumer.AttrSourceMessageID].StringValue))
	return &sqs.SendMessageOutput{MessageId: aws.String("dlq-1")}, nil
}

// A consumer behind an SQS event source mapping: applied events are
// acknowledged, a transient failure is reported in the partial batch
// response (retried after the visibility timeout), a permanent one goes to
// the DLQ at once. In Lambda: lambda.Start(h.Handle), with the mapping's
// FunctionResponseTypes set to ["ReportBatchItemFailures"].
func ExampleNew() {
	apply := func(_ context.Context, ev events.EventBridgeEvent) error {
		switch string(ev.Detail) {
		case `{"n":2}`:
			return errors.New("ledger table throttled")
		case `{"n":3}`:
			return sqsconsumer.Permanent("unsupported_version", errors.New("detail version 9"))
		}
		return nil
	}
	h, err := sqsconsumer.New(apply, sqsconsumer.Config{
		Name: "ledger", DLQ: memDLQ{}, DLQURL: "https://sqs.us-east-1.amazonaws.com/123456789012/ledger-dlq",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: `{"version":"0","detail-type":"OrderPaid","detail":{"n":1}}`},
		{MessageId: "m2", Body: `{"version":"0","detail-type":"OrderPaid","detail":{"n":2}}`},
		{MessageId: "m3", Body: `{"version":"0","detail-type":"OrderPaid","detail":{"n":3}}`},
	}}
	resp, err := h.Handle(context.Background(), batch)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range resp.BatchItemFailures {
		fmt.Println("retry", f.ItemIdentifier)
	}
	// Output:
	// DLQ <- {"version":"0","detail-type":"OrderPaid","detail":{"n":3}} (reason unsupported_version, from m3)
	// retry m2
}
