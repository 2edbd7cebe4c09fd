package devstack

import (
	"context"
	"net"
	"strings"
	"testing"
)

// TestPortInUseNamesTheFlag: a taken port stops Start before anything
// starts, with the make dev flag that picks another address.
func TestPortInUseNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	for _, tc := range []struct {
		opts Options
		flag string
	}{
		{Options{APIAddr: taken}, "-addr HOST:PORT"},
		{Options{AWSAddr: taken}, "-aws-addr HOST:PORT"},
		{Options{ConsoleAddr: taken}, "-console HOST:PORT"},
	} {
		_, err := Start(context.Background(), tc.opts)
		if err == nil || !strings.Contains(err.Error(), taken) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Start with %s taken: err = %v, want the address and %q", taken, err, tc.flag)
		}
	}
}
