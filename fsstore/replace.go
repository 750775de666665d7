package fsstore

// ReplaceFile replaces name with data durably: a temporary file in the same
// directory is written and fsynced, renamed over name, and the directory is
// fsynced. It is how every snapshot-like file of a home is written.
func ReplaceFile(fsys FS, name string, data []byte) error {
	return writeFileDurable(fsys, name, data)
}
