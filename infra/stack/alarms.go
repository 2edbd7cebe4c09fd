package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

func (s *OrdersStack) addAlarmsAndDashboard() {
	five := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}
	s.Alarms = append(s.Alarms, s.Outbox.Alarms...)
	fnAlarm := func(id, desc string, fn awslambda.Function) {
		s.Alarms = append(s.Alarms, awscloudwatch.NewAlarm(s.Stack, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             fn.MetricErrors(five),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
	}
	fnAlarm("ApiErrorsAlarm", "Orders API function invocations failed.", s.APIFunction)
	consumerMetrics := []awscloudwatch.IMetric{}
	dlqMetrics := []awscloudwatch.IMetric{}
	ageMetrics := []awscloudwatch.IMetric{}
	for _, name := range s.homedConsumers() {
		c := s.Consumers[name]
		// the consumer construct's alarms (errors, backlog, DLQ, buffered
		// age and sweep, rule): the rule's are listed with the rules below
		oc := c.Construct
		s.Alarms = append(s.Alarms, oc.ErrorsAlarm, oc.BacklogAlarm, oc.DLQ.Alarm)
		if oc.Sweep != nil {
			s.Alarms = append(s.Alarms, oc.BufferedAgeAlarm, oc.SweepDLQ.Alarm)
			s.Alarms = append(s.Alarms, oc.SweepAlarms...)
		}
		age := oc.QueueAgeMetric()
		consumerMetrics = append(consumerMetrics, c.Function.MetricErrors(five))
		ageMetrics = append(ageMetrics, age)
		dlqMetrics = append(dlqMetrics, c.DLQ.Queue.MetricApproximateNumberOfMessagesVisible(nil))
	}
	for _, r := range routing.Rules() {
		q := s.RuleDLQs[r.Name]
		if q == nil { // a Region without the consumers
			continue
		}
		s.Alarms = append(s.Alarms, q.Alarm)
		s.Alarms = append(s.Alarms, s.RuleAlarms[r.Name]...)
		dlqMetrics = append(dlqMetrics, q.Queue.MetricApproximateNumberOfMessagesVisible(nil))
	}
	s.addAbuseAlarms()
	throttles := []awscloudwatch.IMetric{s.APIFunction.MetricThrottles(five), s.Outbox.Relay.MetricThrottles(five), s.Outbox.Reconciler.MetricThrottles(five)}
	if s.Forwarder != nil {
		s.Alarms = append(s.Alarms, s.Forwarder.Alarms...)
		dlqMetrics = append(dlqMetrics, s.Forwarder.DLQ.Queue.MetricApproximateNumberOfMessagesVisible(nil))
	}
	for _, name := range s.homedConsumers() {
		throttles = append(throttles, s.Consumers[name].Function.MetricThrottles(five))
	}

	graph := func(title string, m ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &m, Width: jsii.Number(8)})
	}
	alarms := make([]interfacesawscloudwatch.IAlarmRef, len(s.Alarms))
	for i, a := range s.Alarms {
		alarms[i] = a
	}
	widgets := []awscloudwatch.IWidget{
		awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
			Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24),
		}),
		graph("API requests / 4xx / 5xx", s.API.MetricCount(five), s.API.MetricClientError(five), s.API.MetricServerError(five)),
		graph("API latency p99 (ms)", s.API.MetricLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99")})),
		graph("API function errors", s.APIFunction.MetricErrors(five)),
		graph("Function throttles", throttles...),
	}
	widgets = append(widgets, s.Outbox.Widgets()...)
	widgets = append(widgets, graph("Consumer errors", consumerMetrics...),
		graph("Consumer queue oldest message age (s)", ageMetrics...),
		graph("Consumer and rule DLQ depth", dlqMetrics...))
	// the alarm status widget fills the first row; the graphs go three a row
	rows := append([][]awscloudwatch.IWidget{{widgets[0]}}, regroup(widgets[1:])...)
	rowPtrs := make([]*[]awscloudwatch.IWidget, len(rows))
	for i := range rows {
		rowPtrs[i] = &rows[i]
	}
	s.Dashboard = awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		Widgets: &rowPtrs,
	})
}

// regroup splits widgets into rows of three.
func regroup(ws []awscloudwatch.IWidget) [][]awscloudwatch.IWidget {
	var rows [][]awscloudwatch.IWidget
	for i := 0; i < len(ws); i += 3 {
		rows = append(rows, ws[i:min(i+3, len(ws))])
	}
	return rows
}
