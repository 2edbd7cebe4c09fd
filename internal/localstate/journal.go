// Package localstate keeps the local runtime's state across restarts of the
// local stack: the messages of its SQS queues, the events its EventBridge bus
// accepted and has not delivered yet, the fulfilment provider's shipments.
// On AWS those live in durable services; locally they live in process
// memory, so without this a stopped stack loses them while the DynamoDB data
// (kept with -data, or by the server at -endpoint) says they were delivered.
//
// A Journal is a durable map from string keys to byte values, kept in one
// append-only file: every Put and Delete appends one record and returns only
// after the record was handed to the operating system with a single write,
// so whatever a caller acknowledged survives the process being killed
// (SIGKILL included). A record torn by a kill during its write fails its
// checksum and is dropped at the next Open; its writer had not returned, so
// nobody was told it was kept. A damaged record inside the file (its
// successor intact) is skipped and the rest kept; damage Open cannot resume
// after drops the rest of the file. Either way the file is first copied,
// as it was, to a ".damaged" sibling (OpenInfo says what was done). The file is
// rewritten (compacted) to its live records when it grows past twice their
// size, through a temporary file, fsync and rename, so a crash during
// compaction leaves either the old or the new file. The journal is fsynced
// at compaction and Close only: a machine crash or power loss can lose the
// records written since (docs/PARITY.md says so).
//
// A journal is bound to a string (the local stack binds it to the outbox
// table's stream ARN): opened with another binding — the tables were
// recreated, a data file was deleted — it discards its records, because
// they describe data that no longer exists (Discarded says how many).
//
// The file is locked (a sibling ".lock" file, flock) while open, so two
// stacks never write one journal.
//
// Record format, little-endian: length uint32 (of the payload), CRC-32C
// uint32 (of the payload), payload. A payload is an op byte and its
// arguments: 'H' binding (the first record); 'P' uvarint key length, key,
// value (the rest); 'D' uvarint count, then per key uvarint length, key.
package localstate

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/google/renameio/v2/maybe"
)

// DefaultCompactMinBytes is the journal size below which it is never
// compacted (4 MiB).
const DefaultCompactMinBytes = 4 << 20

// ErrClosed is returned by writes to a closed Journal.
var ErrClosed = errors.New("localstate: journal is closed")

// ErrLocked is returned by Open when another process holds the journal.
var ErrLocked = errors.New("localstate: journal is in use by another process")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

const (
	opHeader = 'H'
	opPut    = 'P'
	opDelete = 'D'
	// maxRecord bounds one record's payload (64 MiB): larger lengths are
	// read as a torn tail.
	maxRecord = 64 << 20
)

// Options configure Open.
type Options struct {
	// Binding is what the journal belongs to; records written under
	// another binding are discarded at Open. Empty is a binding too.
	Binding string
	// CompactMinBytes is the size below which the file is never compacted
	// (default DefaultCompactMinBytes).
	CompactMinBytes int64
}

// OpenInfo says what Open found.
type OpenInfo struct {
	// Records is the number of live records loaded.
	Records int
	// Discarded is the number of live records dropped because the file
	// was bound to something else (OldBinding).
	Discarded  int
	OldBinding string
	// SkippedRecords is the number of damaged records inside the file that
	// were skipped (their checksum failed, but their length and the next
	// record were intact): the records around them are kept.
	SkippedRecords int
	// TornBytes is the length of a damaged tail dropped: a record cut by a
	// kill during its write, or damage that leaves no next record to
	// resume at (everything from there on is dropped).
	TornBytes int64
	// DamagedCopy is where the file was copied, as it was, before a
	// damaged one was rewritten ("" when it was not damaged): nothing Open
	// dropped is destroyed.
	DamagedCopy string
}

// Damaged reports whether Open dropped or skipped anything of the file.
func (i OpenInfo) Damaged() bool { return i.TornBytes > 0 || i.SkippedRecords > 0 }

// Journal is a durable key-value map in an append-only file. Safe for
// concurrent use.
type Journal struct {
	path    string
	binding string
	minSize int64

	mu        sync.Mutex
	f         *os.File
	lock      *os.File
	size      int64 // bytes in the file
	liveBytes int64 // bytes the live records would take, compacted
	records   map[string][]byte
	closed    bool
	info      OpenInfo
}

// Open opens the journal at path, creating it (and its directory) when
// missing, and loads its live records. Errors: ErrLocked when another
// process has it open; I/O errors otherwise.
func Open(path string, opts Options) (*Journal, error) {
	if opts.CompactMinBytes == 0 {
		opts.CompactMinBytes = DefaultCompactMinBytes
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil { //nolint:gosec // G703: the directory of the journal the stack was configured with
		return nil, fmt.Errorf("localstate: %w", err)
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, err
	}
	j := &Journal{path: path, binding: opts.Binding, minSize: opts.CompactMinBytes, lock: lock, records: map[string][]byte{}}
	if err := j.load(); err != nil {
		unlockFile(lock)
		return nil, err
	}
	return j, nil
}

// load reads the file, keeps every record it can (skipping a damaged
// record whose successor is intact, stopping at damage it cannot resume
// after), copies a damaged file aside, and opens it for appending.
func (j *Journal) load() error {
	b, err := os.ReadFile(j.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("localstate: read %s: %w", j.path, err)
	}
	good, binding, headerOK := int64(0), "", false
	records := map[string][]byte{}
	for off := int64(0); off < int64(len(b)); {
		payload, n, ok := readRecord(b[off:])
		if ok {
			switch {
			case !headerOK:
				if len(payload) == 0 || payload[0] != opHeader {
					ok = false
				} else {
					binding, headerOK = string(payload[1:]), true
				}
			default:
				ok = applyPayload(records, payload)
			}
		}
		if !ok {
			// A record inside the file whose checksum or content is bad
			// but whose length frames it and whose successor is a valid
			// record: skip it and go on. The header cannot be skipped
			// (without it the records' data set is unknown).
			skip := framedLength(b[off:])
			if !headerOK || skip == 0 || off+skip >= int64(len(b)) {
				break
			}
			if _, _, next := readRecord(b[off+skip:]); !next {
				break
			}
			j.info.SkippedRecords++
			n = skip
		}
		off += n
		good = off
	}
	j.info.TornBytes = int64(len(b)) - good
	if j.info.Damaged() {
		j.info.DamagedCopy = j.path + ".damaged"
		if err := maybe.WriteFile(j.info.DamagedCopy, b, 0o600); err != nil {
			return fmt.Errorf("localstate: keep a copy of the damaged %s: %w", j.path, err)
		}
	}
	if headerOK && binding != j.binding {
		j.info.Discarded, j.info.OldBinding = len(records), binding
		records, headerOK, good = map[string][]byte{}, false, 0
	}
	j.records = records
	j.info.Records = len(records)
	for k, v := range records {
		j.liveBytes += putRecordSize(k, v)
	}
	if !headerOK || j.info.Damaged() {
		// A new, rebound or damaged file: rewrite it from what is live.
		return j.rewrite()
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("localstate: %w", err)
	}
	j.f, j.size = f, good
	return nil
}

// framedLength is the length of the record at the start of b as its
// length field gives it, or 0 when that field is missing or runs past b.
func framedLength(b []byte) int64 {
	if len(b) < 8 {
		return 0
	}
	l := int64(binary.LittleEndian.Uint32(b))
	if l > maxRecord || l > int64(len(b)-8) {
		return 0
	}
	return 8 + l
}

// readRecord returns the payload of the record at the start of b and the
// record's length, or ok false when b holds no whole, valid record.
func readRecord(b []byte) (payload []byte, n int64, ok bool) {
	if len(b) < 8 {
		return nil, 0, false
	}
	l := binary.LittleEndian.Uint32(b)
	if l > maxRecord || int64(len(b)-8) < int64(l) {
		return nil, 0, false
	}
	p := b[8 : 8+l]
	if crc32.Checksum(p, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return p, 8 + int64(l), true
}

// applyPayload applies one put or delete to records.
func applyPayload(records map[string][]byte, p []byte) bool {
	if len(p) == 0 {
		return false
	}
	r := bytes.NewReader(p[1:])
	switch p[0] {
	case opPut:
		k, ok := readString(r)
		if !ok {
			return false
		}
		v := make([]byte, r.Len())
		_, _ = io.ReadFull(r, v)
		records[k] = v
	case opDelete:
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return false
		}
		for range n {
			k, ok := readString(r)
			if !ok {
				return false
			}
			delete(records, k)
		}
	default:
		return false
	}
	return true
}

func readString(r *bytes.Reader) (string, bool) {
	n, err := binary.ReadUvarint(r)
	if err != nil || n > uint64(r.Len()) { //nolint:gosec // G115: Len is never negative
		return "", false
	}
	b := make([]byte, n)
	_, _ = io.ReadFull(r, b)
	return string(b), true
}

// frame wraps a payload as a record.
func frame(payload []byte) []byte {
	out := make([]byte, 8+len(payload))
	binary.LittleEndian.PutUint32(out, uint32(len(payload))) //nolint:gosec // G115: Put and Delete refuse payloads over maxRecord (64 MiB)
	binary.LittleEndian.PutUint32(out[4:], crc32.Checksum(payload, crcTable))
	copy(out[8:], payload)
	return out
}

func putPayload(k string, v []byte) []byte {
	p := make([]byte, 0, 1+binary.MaxVarintLen64+len(k)+len(v))
	p = append(p, opPut)
	p = binary.AppendUvarint(p, uint64(len(k)))
	p = append(p, k...)
	return append(p, v...)
}

func putRecordSize(k string, v []byte) int64 {
	return int64(8 + 1 + binary.MaxVarintLen64 + len(k) + len(v))
}

// Info returns what Open found.
func (j *Journal) Info() OpenInfo { return j.info }

// Path returns the journal file's path.
func (j *Journal) Path() string { return j.path }

// Records returns a copy of every live record whose key starts with
// prefix.
func (j *Journal) Records(prefix string) map[string][]byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range j.records {
		if strings.HasPrefix(k, prefix) {
			out[k] = append([]byte(nil), v...)
		}
	}
	return out
}

// Len is the number of live records.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.records)
}

// Put stores value under key: when it returns nil, the record is in the
// file (handed to the OS with one write) and survives the process being
// killed. Errors: ErrClosed, a record over 64 MiB, or the write's error
// (the record then is not kept).
func (j *Journal) Put(key string, value []byte) error {
	if len(key)+len(value) > maxRecord-2*binary.MaxVarintLen64 {
		return fmt.Errorf("localstate: record %q of %d bytes is over the %d-byte limit", key, len(value), maxRecord)
	}
	rec := frame(putPayload(key, value))
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.appendLocked(rec); err != nil {
		return err
	}
	if old, ok := j.records[key]; ok {
		j.liveBytes -= putRecordSize(key, old)
	}
	v := append([]byte(nil), value...)
	j.records[key] = v
	j.liveBytes += putRecordSize(key, v)
	return j.maybeCompactLocked()
}

// Delete removes keys (absent keys are ignored) with one record, under the
// same guarantee as Put.
func (j *Journal) Delete(keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	p := []byte{opDelete}
	p = binary.AppendUvarint(p, uint64(len(keys)))
	for _, k := range keys {
		p = binary.AppendUvarint(p, uint64(len(k)))
		p = append(p, k...)
	}
	if len(p) > maxRecord {
		return fmt.Errorf("localstate: a delete of %d keys is over the %d-byte record limit", len(keys), maxRecord)
	}
	rec := frame(p)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.appendLocked(rec); err != nil {
		return err
	}
	for _, k := range keys {
		if old, ok := j.records[k]; ok {
			j.liveBytes -= putRecordSize(k, old)
			delete(j.records, k)
		}
	}
	return j.maybeCompactLocked()
}

func (j *Journal) appendLocked(rec []byte) error {
	if j.closed {
		return ErrClosed
	}
	n, err := j.f.Write(rec)
	j.size += int64(n)
	if err != nil {
		// A partial record is a torn tail for the next Open; cut it now so
		// later records stay readable.
		if terr := j.f.Truncate(j.size - int64(n)); terr == nil {
			j.size -= int64(n)
		}
		return fmt.Errorf("localstate: write %s: %w", j.path, err)
	}
	return nil
}

func (j *Journal) maybeCompactLocked() error {
	if j.size < j.minSize || j.size < 2*j.liveBytes {
		return nil
	}
	return j.rewrite()
}

// rewrite writes the live records to a new file and renames it over the
// journal; j.mu is held (or j is not shared yet).
func (j *Journal) rewrite() error {
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600) //nolint:gosec // G703: the journal's own temporary file
	if err != nil {
		return fmt.Errorf("localstate: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	size := int64(0)
	write := func(b []byte) {
		if err == nil {
			_, err = w.Write(b)
			size += int64(len(b))
		}
	}
	write(frame(append([]byte{opHeader}, j.binding...)))
	keys := make([]string, 0, len(j.records))
	for k := range j.records {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		write(frame(putPayload(k, j.records[k])))
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path) //nolint:gosec // G703: the path is the journal the stack was configured with
	}
	if err != nil {
		_ = os.Remove(tmp) //nolint:gosec // G703: the journal's own temporary file
		return fmt.Errorf("localstate: compact %s: %w", j.path, err)
	}
	syncDir(filepath.Dir(j.path))
	nf, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // G703: the path is the journal the stack was configured with
	if err != nil {
		return fmt.Errorf("localstate: %w", err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.size = nf, size
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil { //nolint:gosec // G703: the journal's own directory
		_ = d.Sync()
		_ = d.Close()
	}
}

// Sync flushes the file to stable storage (fsync).
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	return j.f.Sync()
}

// Close compacts the journal when that pays off, fsyncs it, closes it and
// releases its lock. Later writes return ErrClosed. Closing twice is a
// no-op.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	var err error
	if j.size > 2*j.liveBytes+int64(64<<10) {
		err = j.rewrite()
	}
	if serr := j.f.Sync(); err == nil {
		err = serr
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.closed = true
	unlockFile(j.lock)
	return err
}
