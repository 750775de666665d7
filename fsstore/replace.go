package fsstore

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
)

// ReplaceFile replaces name with data durably: a temporary file in the same
// directory is written and fsynced, renamed over name, and the directory is
// fsynced. It is how every snapshot-like file of a home is written.
func ReplaceFile(fsys FS, name string, data []byte) error {
	return writeFileDurable(fsys, name, data)
}

// replaceSnapshot replaces the session.json at path with data, unless the
// file there is not one this store wrote or accepted (its content hash is
// not ours): a hand edit, which it never loses. ours zero means nothing is
// known of the file yet, and it is replaced as it is.
//
// The check and the replace are one step: data is written to a temporary
// file beside path and fsynced, and the two names are exchanged
// atomically (renameat2 RENAME_EXCHANGE). The file that comes out is then
// read. If it is ours, it is removed, and the replace is done. If it is
// not, a hand edit landed after the store last looked: it is put back by
// exchanging again, and if what comes out then is not the snapshot
// either (a newer edit renamed over it in the meantime), that newer edit
// goes back in its turn, until what comes out is what was put in last.
// The newest edit ends at path, the snapshot is discarded, and
// ErrHandEdited tells the caller to adopt or refuse the edit. The
// directory is fsynced either way.
//
// What remains: a crash (kill -9, power loss) in the microseconds between
// the exchange and the put-back, when an edit landed in the microseconds
// before the exchange, leaves that edit in the temporary file, which the
// next scan removes. Where the file system cannot exchange, the old check
// then rename is used, which a rename in between it can lose.
func replaceSnapshot(fsys FS, path string, data []byte, ours [sha256.Size]byte) error {
	if ours == ([sha256.Size]byte{}) {
		return fsys.WriteFileAtomic(path, data, filePerm)
	}
	tmp, err := writeTemp(fsys, path, data)
	if err != nil {
		return err
	}
	err = fsys.Exchange(tmp, path)
	switch {
	case errors.Is(err, ErrNoExchange):
		return replaceIfUnchanged(fsys, path, tmp, ours)
	case errors.Is(err, fs.ErrNotExist):
		fsys.Remove(tmp)
		return ErrHandEdited // removed by hand
	case err != nil:
		fsys.Remove(tmp)
		return err
	}
	out, err := fsys.ReadFile(tmp)
	if err != nil {
		return err // tmp holds what was at path: left for the scan
	}
	if sha256.Sum256(out) == ours {
		if err := fsys.Remove(tmp); err != nil {
			return err
		}
		return nil
	}
	// A hand edit came out: put it back, and any newer one after it.
	put := sha256.Sum256(data) // what is at path, as far as we know
	for range 1000 {
		if err := fsys.Exchange(tmp, path); err != nil {
			return err
		}
		back, err := fsys.ReadFile(tmp)
		if err != nil {
			return err
		}
		if sha256.Sum256(back) == put {
			fsys.Remove(tmp)
			return ErrHandEdited
		}
		// back was renamed over what we put at path: it is newer than the
		// edit now at path, and goes back next.
		put = sha256.Sum256(out)
		out = back
	}
	return fmt.Errorf("%w: session.json keeps changing while a snapshot is put back; the edit is in %s", ErrHandEdited, tmp)
}

// replaceIfUnchanged is the fallback of replaceSnapshot where names cannot
// be exchanged: tmp is renamed over path if path still holds ours.
func replaceIfUnchanged(fsys FS, path, tmp string, ours [sha256.Size]byte) error {
	disk, err := fsys.ReadFile(path)
	if err != nil || sha256.Sum256(disk) != ours {
		fsys.Remove(tmp)
		return ErrHandEdited
	}
	if err := fsys.Rename(tmp, path); err != nil {
		fsys.Remove(tmp)
		return err
	}
	return nil
}

// writeTemp writes data to a new temporary file beside path, named as
// renameio names them ("." + base + digits, which a scan removes as a
// leftover), and fsyncs it. The digits come from the content, so that a
// simulated run is the same every time; a name in use (a leftover, or a
// writer of the same bytes) moves on to the next number.
func writeTemp(fsys FS, path string, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	n := binary.BigEndian.Uint64(sum[:8]) % 1e18
	for ; ; n = (n + 1) % 1e18 {
		tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+strconv.FormatUint(n, 10))
		f, err := fsys.Create(tmp, filePerm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fsys.Remove(tmp)
			return "", err
		}
		return tmp, nil
	}
}
