package devstack

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The local console (Options.ConsoleAddr): one server-rendered page
// (html/template) over the running stack, refreshed by a small script that
// fetches its view fragment every second, and the operator actions of
// outboxctl as buttons that call the same code (relay.Redrive,
// operator.Requeue, reconciler.Run, sqsconsumer.Redrive,
// operator.RedriveRuleDLQ). Assets are
// embedded; no CDN, no build step. Read-only except the actions, which are
// POSTs behind the same guard as the API (localGuard: a foreign Host or a
// cross-origin browser request is refused with 403).

//go:embed console_assets
var consoleAssets embed.FS

var consoleTmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"money": money,
	"ms":    msText,
	"join":  strings.Join,
	"ago": func(now time.Time, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
}).ParseFS(consoleAssets, "console_assets/*.html"))

type console struct {
	s           *Stack
	rec         *pathRecorder
	undo        func()
	every       time.Duration
	after       time.Duration
	deadLetters map[string][]string
	server      *http.Server
	url         string
	dlqMu       sync.Mutex // Peek and Redrive of the DLQs, one at a time
}

// ConsoleURL returns the console's URL ("" without Options.ConsoleAddr).
func (s *Stack) ConsoleURL() string {
	if s.console == nil || s.console.server == nil {
		return ""
	}
	return s.console.url
}

// startConsole installs the event-path recorder and serves the console on
// opts.ConsoleAddr (nothing when empty).
func (s *Stack) startConsole(opts Options) error {
	if opts.ConsoleAddr == "" {
		return nil
	}
	c := &console{s: s, rec: newPathRecorder(), every: opts.ReconcileEvery, after: opts.ReconcileAfter,
		deadLetters: opts.DeadLetterTypes}
	c.undo = installPathRecorder(c.rec)
	s.console = c
	ln, err := net.Listen("tcp", opts.ConsoleAddr)
	if err != nil {
		return fmt.Errorf("devstack: console: listen on %s: %w%s (another console address: -console HOST:PORT; none: -console '')", opts.ConsoleAddr, err, portHolder(opts.ConsoleAddr))
	}
	c.url = "http://" + ln.Addr().String()
	warnIfExposed(s.log, "the console", opts.ConsoleAddr)
	c.server = &http.Server{Handler: localGuard(c.routes(), []string{opts.ConsoleAddr, ln.Addr().String()}, opts.AllowedHosts, apiDenier),
		ReadHeaderTimeout: 5 * time.Second}
	srv := c.server
	s.goRun(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console stopped", "error", err)
		}
	})
	return nil
}

// closeConsole stops the console's server and removes the recorder.
func (s *Stack) closeConsole(ctx context.Context) {
	if s.console == nil {
		return
	}
	if s.console.server != nil {
		_ = s.console.server.Shutdown(ctx)
	}
	if s.console.undo != nil {
		s.console.undo()
	}
}

func (c *console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(consoleAssets, "console_assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.page("page"))
	mux.HandleFunc("GET /view", c.page("view"))
	mux.HandleFunc("POST /actions/reconcile", c.action(c.reconcileNow))
	mux.HandleFunc("POST /actions/redrive", c.action(c.redrive))
	mux.HandleFunc("POST /actions/replay", c.action(c.replay))
	mux.HandleFunc("POST /actions/consumer-redrive", c.action(c.consumerRedrive))
	mux.HandleFunc("POST /actions/rule-dlq-redrive", c.action(c.ruleDLQRedrive))
	mux.HandleFunc("POST /actions/stop-rejecting", c.action(c.stopRejecting))
	mux.HandleFunc("POST /actions/stop-refusing", c.action(c.stopRefusing))
	return mux
}

func (c *console) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		v := c.view(ctx)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
		if err := consoleTmpl.ExecuteTemplate(w, name, v); err != nil {
			c.s.log.Error("console: render", "error", err)
		}
	}
}

// action runs f for a POST (cross-origin ones were refused by localGuard)
// and answers its result as text (status 200 when it succeeded, 422 when it
// did not).
func (c *console) action(f func(ctx context.Context, r *http.Request) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		msg, err := f(ctx, r)
		if err != nil {
			c.s.log.Warn("console action failed", "path", r.URL.Path, "error", err)
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprintln(w, strings.TrimSpace(msg+"\n"+err.Error()))
			return
		}
		c.s.log.Info("console action", "path", r.URL.Path, "result", msg)
		fmt.Fprintln(w, msg)
	}
}

// nextReconcile is when the reconciler's schedule runs next.
func (c *console) nextReconcile() time.Time {
	if c.every <= 0 {
		return time.Time{}
	}
	return State{ReconcileEvery: c.every, Started: c.s.started}.NextReconcile(time.Now())
}

// publishHint says when the reconciler publishes a record made pending now.
func (c *console) publishHint() string {
	return fmt.Sprintf("the reconciler publishes it on its next run (every %s; the next in %s) once older than %s (outboxdev dev -reconcile-after), or press Reconcile now",
		c.every, time.Until(c.nextReconcile()).Round(time.Second), c.after)
}

func (c *console) reconcileNow(ctx context.Context, _ *http.Request) (string, error) {
	rep, err := c.s.Reconciler.Run(ctx)
	msg := fmt.Sprintf("reconciler ran: %d re-sent, %d parked, %d left pending (records younger than %s wait for a later run)", rep.Resent, rep.Parked, rep.Pending, c.after)
	return msg, err
}

func (c *console) redrive(ctx context.Context, r *http.Request) (string, error) {
	s := c.s
	var keys []outbox.Key
	if r.FormValue("all") != "" {
		recs, err := relay.ListParked(ctx, s.DDB, s.Settings.OutboxTable, 0)
		if err != nil {
			return "", err
		}
		for _, p := range recs {
			keys = append(keys, p.Key)
		}
	} else {
		pk, sk := r.FormValue("pk"), r.FormValue("sk")
		if pk == "" || sk == "" {
			return "", errors.New("redrive: pk and sk are required (or all=1)")
		}
		keys = append(keys, outbox.Key{PK: pk, SK: sk})
	}
	if len(keys) == 0 {
		return "no parked record to redrive", nil
	}
	var errs []error
	n, gone := 0, 0
	for _, k := range keys {
		if err := relay.Redrive(ctx, s.DDB, s.Settings.OutboxTable, s.Settings.PendingShards, k, time.Now(), relay.RedriveInRegion(s.Settings.Region)); err != nil {
			if errors.Is(err, relay.ErrNotParked) {
				gone++ // redriven by another click or outboxctl, or no such record
				continue
			}
			errs = append(errs, err)
			continue
		}
		n++
	}
	if n == 0 {
		msg := fmt.Sprintf("nothing redriven: %d of %d record(s) no longer parked (already redriven, or no such record)", gone, len(keys))
		if gone == len(keys) && len(keys) == 1 {
			return msg, fmt.Errorf("%w", relay.ErrNotParked)
		}
		return msg, errors.Join(errs...)
	}
	msg := fmt.Sprintf("%d of %d record(s) redriven: now PENDING; %s", n, len(keys), c.publishHint())
	if gone > 0 {
		msg += fmt.Sprintf(" (%d no longer parked: already redriven)", gone)
	}
	if rej := s.Rejecting(); len(rej) > 0 {
		msg += fmt.Sprintf(". The bus still rejects %s: press Stop rejecting first, or the record is parked again", strings.Join(rej, ", "))
	}
	return msg, errors.Join(errs...)
}

func (c *console) replay(ctx context.Context, r *http.Request) (string, error) {
	s := c.s
	id := r.FormValue("event_id")
	if id == "" {
		return "", errors.New("replay: event_id is required")
	}
	views, err := operator.FindEvent(ctx, s.DDB, s.Settings.OutboxTable, id)
	if err != nil {
		return "", err
	}
	res, err := operator.Requeue(ctx, s.DDB, s.Settings.OutboxTable, s.Settings.PendingShards, views, time.Now())
	var parts []string
	for _, x := range res {
		parts = append(parts, x.Outcome+" "+x.View.EventType+" #"+strconv.FormatInt(x.View.Sequence, 10)+": "+x.Reason)
	}
	return strings.Join(parts, "; ") + "; " + c.publishHint(), err
}

func (c *console) consumerRedrive(ctx context.Context, r *http.Request) (string, error) {
	name := r.FormValue("consumer")
	p, ok := c.s.Consumers[name]
	if !ok {
		return "", fmt.Errorf("consumer-redrive: no consumer %q", name)
	}
	c.dlqMu.Lock()
	defer c.dlqMu.Unlock()
	from := sqsconsumer.Provenance{SourceQueueARN: p.Queue.ARN(), SenderIDs: []string{localrt.FunctionRoleID(name)}}
	res, err := sqsconsumer.Redrive(ctx, p.DLQ, p.DLQ.URL(), p.Queue, p.Queue.URL(), sqsconsumer.RedriveOptions{From: from})
	msg := fmt.Sprintf("%d message(s) redriven from %s to %s; %d left on the DLQ", res.Moved, lastSegment(p.DLQ.URL()), lastSegment(p.Queue.URL()), len(res.Left))
	if len(c.deadLetters[name]) > 0 {
		msg += fmt.Sprintf(" (the fault switch -dead-letter still refuses %s for %s: they come back)", strings.Join(c.deadLetters[name], ", "), name)
	}
	return msg, err
}

// ruleDLQRedrive moves a rule DLQ's events back to its consumer's queue
// with operator.RedriveRuleDLQ, as outboxctl rule-dlq-redrive does.
func (c *console) ruleDLQRedrive(ctx context.Context, r *http.Request) (string, error) {
	rule := r.FormValue("rule")
	p, ok := c.s.Rules[rule]
	if !ok {
		return "", fmt.Errorf("rule-dlq-redrive: no rule %q", rule)
	}
	c.dlqMu.Lock()
	defer c.dlqMu.Unlock()
	res, err := c.s.RedriveRuleDLQ(ctx, rule, false)
	msg := fmt.Sprintf("%d message(s) redriven from %s to %s; %d left on the DLQ", res.Moved, lastSegment(p.DLQ.URL()), lastSegment(c.s.Consumers[p.Consumer].Queue.URL()), len(res.Left))
	for _, l := range res.Left {
		msg += fmt.Sprintf("; left %s: %s", l.MessageID, l.Why)
	}
	if slices.Contains(c.s.Refusing(), p.Consumer) {
		msg += fmt.Sprintf(" (the fault switch -refuse-delivery still makes the %s queue refuse the bus: its next events land on the rule DLQ too)", p.Consumer)
	}
	return msg, err
}

func (c *console) stopRefusing(context.Context, *http.Request) (string, error) {
	consumers := c.s.Refusing()
	if !c.s.StopRefusing() {
		return "no queue refuses the bus", nil
	}
	return "the queues of " + strings.Join(consumers, ", ") + " take the bus's deliveries again: redrive their rule DLQs to deliver what they refused", nil
}

func (c *console) stopRejecting(context.Context, *http.Request) (string, error) {
	types := c.s.Rejecting()
	if !c.s.StopRejecting() {
		return "the bus rejects nothing", nil
	}
	return "the bus accepts " + strings.Join(types, ", ") + " again: redrive the parked records to publish them", nil
}
