package stack

import (
	"fmt"
	"strings"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// Reserved concurrency and the account's Lambda concurrency quota: what
// the stack reserves, what an account can give, and the preflight check.

// RecommendedReservedConcurrency is the reserved concurrency recommended
// for the api, the relay and the reconciler in an account whose Lambda
// concurrency quota leaves room for it (RecommendedReservations adds the
// consumers). Nothing is reserved by default: a new account's quota (10, 50
// or 100) leaves nothing to reserve (MinUnreservedConcurrency), and the
// stack must deploy there. With these and the consumers' 22 each, 107 are
// reserved and the quota must be at least 207. Reservations bound what a
// flood of requests or events can cost and keep the rest of the account's
// concurrency free; without them every function shares the unreserved
// pool, and the consumers' SQS event source mappings are bounded by their
// own MaximumConcurrency (ConsumerScaling). The relay runs one instance per
// stream shard times the mapping's ParallelizationFactor: with more shards
// than its reservation, batches wait (the IteratorAge alarm shows it).
var RecommendedReservedConcurrency = map[string]int{
	APIFunction:                  20,
	outboxcdk.RelayFunction:      20,
	outboxcdk.ReconcilerFunction: outboxcdk.ReconcilerReservedConcurrency,
}

// RecommendedReservations returns RecommendedReservedConcurrency plus each
// consumer at its SQS event source mapping's peak concurrency
// (ConsumerScaling.PeakConcurrency(): the least that keeps the mapping from
// being throttled), as a ReservedConcurrency value: what the context value
// ddb-outbox:reservedConcurrency=recommended sets. Validate then needs
// AccountConcurrency.
func (p OrdersStackProps) RecommendedReservations() map[string]int {
	out := make(map[string]int, len(functionNames))
	for fn, n := range RecommendedReservedConcurrency {
		out[fn] = n
	}
	for _, name := range consumerNames {
		out[name] = p.ConsumerScaling.PeakConcurrency()
	}
	return out
}

// maxReservedConcurrency is the largest reserved concurrency Validate
// accepts: the default account concurrency quota (1,000).
const maxReservedConcurrency = 1000

// ReservedTotal returns the concurrency the stack reserves, summed over its
// functions (NoReservedConcurrency counts 0), with the defaults applied.
func (p OrdersStackProps) ReservedTotal() int {
	p.SetDefaults()
	total := 0
	for _, fn := range functionNames {
		total += max(p.ReservedConcurrency[fn], 0)
	}
	return total
}

// unreservedConsumerPeak returns the summed peak concurrency of the
// consumers without reserved concurrency (defaults applied) and their
// names.
func (p OrdersStackProps) unreservedConsumerPeak() (int, []string) {
	p.SetDefaults()
	total, names := 0, []string(nil)
	for _, name := range consumerNames {
		if p.ReservedConcurrency[name] == NoReservedConcurrency {
			total += p.ConsumerScaling.PeakConcurrency()
			names = append(names, name)
		}
	}
	return total, names
}

// AccountRequirement says, in one message, what the account's Lambda
// concurrency quota must be for these props (defaults applied): the
// reservations per function and their total; with none (the default) that
// any quota deploys, and how to opt in; otherwise the smallest quota that
// leaves MinUnreservedConcurrency unreserved, with the command that shows
// the quota; and what the consumers without a reservation can start from
// the unreserved pool. NewOrdersStack adds it to the synth output (info).
func (p OrdersStackProps) AccountRequirement() string {
	p.SetDefaults()
	total := p.ReservedTotal()
	var msg string
	if total == 0 {
		msg = "Reserved concurrency: none. Nothing is reserved: any account quota deploys, a new account's (10, 50 or 100) included. " +
			"To reserve (api 20, relay 20, reconciler 1, each consumer its mapping's peak), an account's quota must leave room: pass " +
			"-c ddb-outbox:reservedConcurrency=" + ReservationsRecommended + " -c ddb-outbox:accountConcurrency=<quota> " +
			"(`aws lambda get-account-settings --query AccountLimit.ConcurrentExecutions`)."
	} else {
		parts := make([]string, 0, len(functionNames))
		for _, fn := range functionNames {
			n := p.ReservedConcurrency[fn]
			if n == NoReservedConcurrency {
				parts = append(parts, fn+" none")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %d", fn, n))
		}
		msg = fmt.Sprintf("Reserved concurrency: %s = %d in all.", strings.Join(parts, ", "), total)
		msg += fmt.Sprintf(" The account's Lambda concurrency quota must be at least %d (%d + the %d Lambda keeps unreserved); "+
			"check it with `aws lambda get-account-settings --query AccountLimit.ConcurrentExecutions`. A smaller quota "+
			"(a new account's is 10, 50 or 100): request an increase (Service Quotas, Lambda \"Concurrent executions\"), or "+
			"deploy without reservations (the default: leave ddb-outbox:reservedConcurrency unset).",
			total+MinUnreservedConcurrency, total, MinUnreservedConcurrency)
	}
	if peak, names := p.unreservedConsumerPeak(); len(names) > 0 {
		msg += fmt.Sprintf(" Consumers without reservation (%s) can start %d invocations together from the unreserved pool "+
			"(their SQS event source mappings' MaximumConcurrency or pollers); a throttled message counts toward maxReceiveCount.",
			strings.Join(names, ", "), peak)
	}
	return msg
}

// fittingConsumerMaxConcurrency returns the largest SQS mapping
// MaximumConcurrency with which n unreserved consumers together start at
// most pool invocations (0 when not even outboxcdk.MinSQSMaxConcurrency
// each fits).
func fittingConsumerMaxConcurrency(pool, n int) int {
	if n == 0 {
		return 0
	}
	m := min(pool/n, outboxcdk.MaxSQSMaxConcurrency)
	if m < outboxcdk.MinSQSMaxConcurrency {
		return 0
	}
	return m
}

// preflight checks the reservations against AccountConcurrency and
// returns the problems: reservations without a quota to check them
// against, reservations the quota cannot hold, and unreserved consumers
// that could start more invocations together than the unreserved pool
// holds (one message naming the quota and the setting that fits it).
func (p OrdersStackProps) preflight() []error {
	if p.AccountConcurrency < 0 {
		return []error{fmt.Errorf("AccountConcurrency %d is negative (0: unknown)", p.AccountConcurrency)}
	}
	total := p.ReservedTotal()
	if p.AccountConcurrency == 0 {
		if total > 0 {
			return []error{fmt.Errorf("the stack reserves %d concurrent executions but the account's Lambda concurrency quota is not given: pass "+
				"-c ddb-outbox:accountConcurrency=<quota> (`aws lambda get-account-settings --query AccountLimit.ConcurrentExecutions`) so that synth "+
				"checks it, since a quota that cannot hold the reservations fails the deploy half-way; a new account's quota (10, 50 or 100) holds "+
				"none: deploy without reservations (the default)", total)}
		}
		return nil
	}
	var errs []error
	if total > 0 && total > p.AccountConcurrency-MinUnreservedConcurrency {
		errs = append(errs, fmt.Errorf("the stack reserves %d concurrent executions but an account quota of %d leaves only %d to reserve "+
			"(Lambda keeps %d unreserved): %s", total, p.AccountConcurrency, max(p.AccountConcurrency-MinUnreservedConcurrency, 0),
			MinUnreservedConcurrency, p.AccountRequirement()))
	}
	if peak, names := p.unreservedConsumerPeak(); len(names) > 0 && peak > p.AccountConcurrency-total {
		pool := p.AccountConcurrency - total
		fix := "request a quota increase (Service Quotas, Lambda \"Concurrent executions\"): not even the smallest MaximumConcurrency " +
			fmt.Sprint(outboxcdk.MinSQSMaxConcurrency) + " fits"
		if m := fittingConsumerMaxConcurrency(pool, len(names)); m > 0 {
			fix = fmt.Sprintf("deploy with -c ddb-outbox:consumerMaxConcurrency=%d (%d × %d ≤ %d; instead of provisioned pollers, if set), "+
				"or request a quota increase", m, len(names), m, pool)
		}
		errs = append(errs, fmt.Errorf("with an account quota of %d, consumers without reserved concurrency (%s) can start %d invocations "+
			"together, more than the %d the account leaves unreserved: under load they would be throttled, and a throttled SQS message "+
			"counts toward maxReceiveCount until it reaches the DLQ; %s", p.AccountConcurrency, strings.Join(names, ", "), peak, pool, fix))
	}
	return errs
}
