package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// withHint adds what to do to the errors a new user meets first: no region
// (a local stack needs -endpoint), a refused connection (nothing listens:
// is make dev running?). Other errors are returned as they are.
func withHint(err error, t target) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNoRegion):
		return fmt.Errorf("%w; for the local stack pass -endpoint http://127.0.0.1:4580 (make dev's AWS endpoint, -aws-addr)", err)
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused"):
		where := t.endpoint
		if where == "" {
			where = "the endpoint"
		}
		return fmt.Errorf("%w\nnothing listens at %s: is `make dev` running? (its AWS endpoint is -aws-addr, default 127.0.0.1:4580, printed in its banner)", err, where)
	}
	return err
}

// errNoRegion: no region configured against AWS.
var errNoRegion = errors.New("no AWS region: set AWS_REGION, a profile region, or -region")
