//go:build !unix

package localstate

import (
	"fmt"
	"os"
)

// lockFile creates path; without flock the journal is not protected from a
// second process (not modelled off Unix).
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localstate: %w", err)
	}
	return f, nil
}

func unlockFile(f *os.File) { _ = f.Close() }
