package sqlitedb

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// fileMode is the mode of the database and its companions: the database
// holds password and key hashes, so only Sluice's own user may read it.
const fileMode = 0o600

// companions are the files SQLite keeps beside the database in WAL mode.
var companions = []string{"-wal", "-shm", "-journal"}

// restrictFiles makes the database file exist with mode 0600 before SQLite
// opens it, and brings an existing database and its companions down to
// 0600. The mode is set with chmod, so neither the umask nor the data
// directory's mode matters. SQLite creates the WAL and shared-memory files
// with the database file's mode, so they follow.
func restrictFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	for _, p := range append([]string{""}, companions...) {
		if err := os.Chmod(path+p, fileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restrict %s: %w", path+p, err)
		}
	}
	return nil
}
