package pool

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"idlepool/job"
)

// The journal is an append-only file of task outcomes that makes a solo run
// resumable. Layout:
//
//	header: "idlepool-journal v1\n" then the 32-byte job ID
//	record: length uint32 BE | CRC-32C (Castagnoli) of payload uint32 BE | payload
//	payload: task index uint64 BE | status byte (1 ok, 2 failed) | body
//
// body is the program's result (ok) or the failure reason (failed). Each
// record is written with a single write call, so a killed process leaves at
// most one torn record at the tail, which opening detects by its length or
// checksum and cuts off. fsync runs every SyncEvery records and on Close.

const journalMagic = "idlepool-journal v1\n"

// Journal statuses.
const (
	StatusOK     byte = 1
	StatusFailed byte = 2
)

// maxRecord bounds one record's payload (a result is at most 64 MiB).
const maxRecord = 64<<20 + 9

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Journal appends task outcomes of one job to a file. Not safe for
// concurrent use.
type Journal struct {
	f         *os.File
	unsynced  int
	SyncEvery int // records between fsyncs; default 256
}

// JournalRecord is one task outcome read back from a journal.
type JournalRecord struct {
	Index  int64
	Status byte
	Body   []byte
}

// OpenJournal opens (creating if needed) the journal at path for job id,
// calls replay for every intact record in file order, cuts off a torn tail,
// and returns the journal positioned for appending. A journal of another
// job, or with a damaged record before the tail, is an error wrapping
// ErrJournal; nothing is truncated then.
func OpenJournal(path string, id job.ID, replay func(JournalRecord) error) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	good, err := readJournal(f, id, replay)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if good == 0 {
		hdr := append([]byte(journalMagic), id[:]...)
		if _, err := f.WriteAt(hdr, 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("write journal header: %w", err)
		}
		good = int64(len(hdr))
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("truncate journal tail: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &Journal{f: f, SyncEvery: 256}, nil
}

// readJournal replays f's records and returns the offset just past the
// last intact one (0 for an empty file).
func readJournal(f *os.File, id job.ID, replay func(JournalRecord) error) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() == 0 {
		return 0, nil
	}
	r := bufio.NewReaderSize(f, 1<<20)
	hdr := make([]byte, len(journalMagic)+len(id))
	if _, err := io.ReadFull(r, hdr); err != nil || !bytes.HasPrefix(hdr, []byte(journalMagic)) {
		if int64(len(hdr)) > st.Size() && bytes.HasPrefix([]byte(journalMagic), hdr[:min(int(st.Size()), len(journalMagic))]) {
			return 0, nil // torn header: start over
		}
		return 0, fmt.Errorf("%w: not an idlepool journal", ErrJournal)
	}
	if !bytes.Equal(hdr[len(journalMagic):], id[:]) {
		return 0, fmt.Errorf("%w: it belongs to job %x, not %s", ErrJournal, hdr[len(journalMagic):], id)
	}
	off := int64(len(hdr))
	var head [8]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return off, nil // clean end or torn head
		}
		n := binary.BigEndian.Uint32(head[:4])
		sum := binary.BigEndian.Uint32(head[4:])
		if n < 9 || n > maxRecord || off+8+int64(n) > st.Size() {
			if off+8+int64(n) > st.Size() {
				return off, nil // torn tail
			}
			return 0, fmt.Errorf("%w: bad record length %d at byte %d", ErrJournal, n, off)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return off, nil
		}
		if crc32.Checksum(payload, castagnoli) != sum {
			if off+8+int64(n) == st.Size() {
				return off, nil // torn last record
			}
			return 0, fmt.Errorf("%w: checksum mismatch in record at byte %d", ErrJournal, off)
		}
		rec := JournalRecord{Index: int64(binary.BigEndian.Uint64(payload[:8])), Status: payload[8], Body: payload[9:]}
		if rec.Status != StatusOK && rec.Status != StatusFailed {
			return 0, fmt.Errorf("%w: unknown status %d at byte %d", ErrJournal, rec.Status, off)
		}
		if err := replay(rec); err != nil {
			return 0, err
		}
		off += 8 + int64(n)
	}
}

// Append writes one record with a single write call. It fsyncs every
// SyncEvery records.
func (j *Journal) Append(rec JournalRecord) error {
	if len(rec.Body) > maxRecord-9 {
		return fmt.Errorf("%w: record of %d bytes is too large", ErrJournal, len(rec.Body))
	}
	buf := make([]byte, 8+9+len(rec.Body))
	binary.BigEndian.PutUint32(buf[0:], uint32(9+len(rec.Body)))
	binary.BigEndian.PutUint64(buf[8:], uint64(rec.Index))
	buf[16] = rec.Status
	copy(buf[17:], rec.Body)
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(buf[8:], castagnoli))
	if _, err := j.f.Write(buf); err != nil {
		return fmt.Errorf("append to journal: %w", err)
	}
	if j.unsynced++; j.unsynced >= j.SyncEvery {
		return j.Sync()
	}
	return nil
}

// Sync flushes the journal to stable storage.
func (j *Journal) Sync() error {
	j.unsynced = 0
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// Close syncs and closes the journal.
func (j *Journal) Close() error {
	return errors.Join(j.Sync(), j.f.Close())
}
