package devstack

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
)

// DefaultRejectCode is the PutEvents entry error code the local bus answers
// for Options.RejectDetailTypes: permanent, so the relay parks the record.
const DefaultRejectCode = localrt.ErrorCodeMalformedDetail

// publishPath returns the bus as the relay, the reconciler and the AWS front
// publish to it: with opts.RejectDetailTypes, every entry of those detail
// types is refused with opts.RejectCode (default DefaultRejectCode), as
// EventBridge refuses an entry it will never accept.
func (s *Stack) publishPath(opts Options) (localrt.PutEventsAPI, error) {
	if len(opts.RejectDetailTypes) == 0 {
		return s.Bus, nil
	}
	code := opts.RejectCode
	if code == "" {
		code = DefaultRejectCode
	}
	r, err := localstack.NewRejectSwitch(s.Bus, code, opts.RejectDetailTypes...)
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	s.log.Warn("the local bus rejects these detail types permanently: their outbox records will be parked", "detail_types", opts.RejectDetailTypes, "error_code", code)
	// the rejecting bus until StopRejecting lifts the fault (the
	// console's button), so parked records can be redriven without a
	// restart
	s.rejecting = r
	return r, nil
}

// Rejecting returns the detail types the local bus refuses now
// (Options.RejectDetailTypes until StopRejecting; nil without them).
func (s *Stack) Rejecting() []string {
	return s.rejecting.Rejecting()
}

// StopRejecting lifts Options.RejectDetailTypes: from now on the bus
// accepts those detail types (redrive the parked records to publish them).
// It reports whether a rejection was active.
func (s *Stack) StopRejecting() bool {
	return s.rejecting.Stop()
}

// Queues returns every SQS queue of the stack by name (the last segment of
// its URL): the parked-records queue (<prefix>-parked), the stream event
// source mapping's on-failure destination (<prefix>-relay-onfailure),
// each consumer's queue and DLQ (<prefix>-<consumer>, <prefix>-<consumer>-dlq),
// and each routing rule's DLQ (<prefix>-<rule>-rule-dlq).
func (s *Stack) Queues() map[string]localrt.FrontQueue {
	qs := map[string]localrt.FrontQueue{}
	add := func(q localrt.FrontQueue) { qs[lastSegment(q.URL())] = q }
	add(s.ParkedQueue)
	add(s.OnFailureQueue)
	for _, c := range s.Consumers {
		add(c.Queue)
		add(c.DLQ)
	}
	for _, r := range s.Rules {
		add(r.DLQ)
	}
	return qs
}

func lastSegment(u string) string {
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] == '/' {
			return u[i+1:]
		}
	}
	return u
}

// QueueNames returns the names of Queues, sorted.
func (s *Stack) QueueNames() []string {
	qs := s.Queues()
	names := make([]string, 0, len(qs))
	for n := range qs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// startAWSFront serves the stack's queues, the publish path eb and (proxied)
// its DynamoDB endpoint over the AWS JSON protocols on opts.AWSAddr, so that
// outboxctl and the AWS CLI reach them from another process with
// `-endpoint s.AWSURL` and dummy credentials. Empty AWSAddr: no front.
func (s *Stack) startAWSFront(opts Options, eb localrt.PutEventsAPI) error {
	if opts.AWSAddr == "" {
		return nil
	}
	qs := s.Queues()
	list := make([]localrt.FrontQueue, 0, len(qs))
	for _, n := range s.QueueNames() {
		list = append(list, qs[n])
	}
	// PutEvents through the publish path (it may reject detail types);
	// archives, replays and rules straight from the bus.
	front, err := localrt.NewAWSFront(localrt.AWSFrontConfig{Queues: list, EventBridge: frontBus{eb, s.Bus}, DynamoDB: s.Endpoint})
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	s.front = front
	ln, err := net.Listen("tcp", opts.AWSAddr)
	if err != nil {
		return fmt.Errorf("devstack: AWS front: listen on %s: %w%s", opts.AWSAddr, err, portHolder(opts.AWSAddr))
	}
	s.AWSURL = "http://" + ln.Addr().String()
	warnIfExposed(s.log, "the AWS front", opts.AWSAddr)
	s.awsServer = &http.Server{Handler: localGuard(front, []string{opts.AWSAddr, ln.Addr().String()}, opts.AllowedHosts, awsDenier),
		ReadHeaderTimeout: 5 * time.Second}
	srv := s.awsServer
	s.goRun(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("AWS front stopped", "error", err)
		}
	})
	s.log.Info("AWS front ready (SQS, EventBridge PutEvents, archive and replays, DynamoDB proxy)", "endpoint", s.AWSURL, "archive", s.ArchiveName)
	return nil
}

// frontBus is the EventBridge the AWS front serves: PutEvents through the
// stack's publish path, the archive and replay operations of its bus.
type frontBus struct {
	localrt.PutEventsAPI
	localrt.ArchiveAPI
}
