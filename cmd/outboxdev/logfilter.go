package main

import (
	"context"
	"log/slog"
	"strings"
)

// walkthroughHandler keeps the dev terminal to one line per hop: it passes
// warnings and errors, and at INFO only the hop lines (devstack.Options.HopLog),
// the API's commit and request lines and the stack's own start-up lines;
// `outboxdev dev -v` shows everything.
type walkthroughHandler struct{ slog.Handler }

func (h walkthroughHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn || strings.HasPrefix(r.Message, "hop:") || strings.HasPrefix(r.Message, "order ") ||
		r.Message == "http request" || strings.Contains(r.Message, "stack") || strings.Contains(r.Message, "dynoxide") ||
		strings.Contains(r.Message, "reusing") || strings.Contains(r.Message, "resuming") {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h walkthroughHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return walkthroughHandler{h.Handler.WithAttrs(as)}
}

func (h walkthroughHandler) WithGroup(name string) slog.Handler {
	return walkthroughHandler{h.Handler.WithGroup(name)}
}
