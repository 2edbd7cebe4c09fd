package localstate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// journalFile writes a journal bound to "b" holding a=1, b=2, c=3 (one
// record each, in that order after the header) and returns its path and
// bytes.
func journalFile(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	j := open(t, path, "b")
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}} {
		if err := j.Put(kv[0], []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// TestJournalRecoversFromDamage: a damaged journal opens, keeps every
// record it can — the prefix before damage it cannot resume after, and the
// records on both sides of a damaged record inside the file — says what it
// did in OpenInfo, keeps the file as it was in a ".damaged" copy, and is
// writable and whole afterwards.
func TestJournalRecoversFromDamage(t *testing.T) {
	t.Parallel()
	header := int64(len(frame(append([]byte{opHeader}, 'b'))))
	rec := int64(len(frame(putPayload("a", []byte("1")))))
	tests := []struct {
		name    string
		damage  func([]byte) []byte
		keep    []string
		skipped int
		torn    bool
	}{
		{"empty file", func([]byte) []byte { return nil }, nil, 0, false},
		{"cut inside the header", func(b []byte) []byte { return b[:header-2] }, nil, 0, true},
		{"cut inside the second record", func(b []byte) []byte { return b[:header+rec+3] }, []string{"a"}, 0, true},
		{"cut after the second record", func(b []byte) []byte { return b[:header+2*rec] }, []string{"a", "b"}, 0, false},
		{"a flipped byte in the second record's value", func(b []byte) []byte {
			b = bytes.Clone(b)
			b[header+2*rec-1] ^= 0xff
			return b
		}, []string{"a", "c"}, 1, false},
		{"a flipped byte in the last record's value", func(b []byte) []byte {
			b = bytes.Clone(b)
			b[len(b)-1] ^= 0xff
			return b
		}, []string{"a", "b"}, 0, true},
		{"garbage after the records", func(b []byte) []byte { return append(bytes.Clone(b), "garbage, not a record"...) }, []string{"a", "b", "c"}, 0, true},
		{"garbage instead of a journal", func([]byte) []byte { return []byte(`{"not":"a journal"}`) }, nil, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, orig := journalFile(t)
			damaged := tc.damage(orig)
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			j := open(t, path, "b")
			info := j.Info()
			got := j.Records("")
			if len(got) != len(tc.keep) {
				t.Errorf("kept %v, want the records %v", got, tc.keep)
			}
			for _, k := range tc.keep {
				if _, ok := got[k]; !ok {
					t.Errorf("record %q lost; kept %v", k, got)
				}
			}
			if info.SkippedRecords != tc.skipped || (info.TornBytes > 0) != tc.torn {
				t.Errorf("info %+v, want %d skipped, torn tail %v", info, tc.skipped, tc.torn)
			}
			if info.Damaged() {
				if c, err := os.ReadFile(info.DamagedCopy); err != nil || !bytes.Equal(c, damaged) {
					t.Errorf("damaged copy %q: %v, equal to the file as it was: %v", info.DamagedCopy, err, bytes.Equal(c, damaged))
				}
			} else if info.DamagedCopy != "" {
				t.Errorf("a copy %q of an undamaged file", info.DamagedCopy)
			}
			if err := j.Put("d", []byte("4")); err != nil {
				t.Fatal(err)
			}
			_ = j.Close()
			j = open(t, path, "b")
			defer j.Close()
			if info := j.Info(); info.Damaged() || j.Len() != len(tc.keep)+1 {
				t.Errorf("reopened after recovery: %+v, %d records, want whole with %d", info, j.Len(), len(tc.keep)+1)
			}
		})
	}
}
