// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package modes

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lockDataDir claims --data-dir for this process before the embedded etcd
// opens it: etcd waits for its database's lock as long as another process
// holds it, silently, so a second bridge on the same directory would never
// serve nor fail. It takes an exclusive lock on <dir>/v2bridge.lock without
// waiting and writes the process's PID in the file; the lock lasts until
// release is called or the process ends. A lock already taken is an error
// naming the holder's PID. Then it checks, without waiting either, that no
// other process (an etcd, or a bridge from before this lock) has the
// member's database open.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil { // etcd's own mode for it
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	name := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600) //nolint:gosec // G304: in the operator's --data-dir
	if err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer func() { _ = f.Close() }()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := io.ReadAll(io.LimitReader(f, 32))
			return nil, dataDirInUse(dir, string(pid))
		}
		return nil, fmt.Errorf("--data-dir: lock %s: %w", name, err)
	}
	// The file stays: removing it on exit would let a bridge that opened it
	// just before lock a file no other bridge looks at any more.
	if err := writePID(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--data-dir: %s: %w", name, err)
	}
	if err := checkDatabaseFree(dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// writePID replaces the lock file's content with this process's PID.
func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// checkDatabaseFree reports a --data-dir whose etcd database (bbolt's file,
// which bbolt locks exclusively while it is open for writing) another
// process has open. The shared lock it takes to find out is released at
// once, before etcd opens the file. Anything else wrong with the file is
// left for etcd to report.
func checkDatabaseFree(dir string) error {
	db := filepath.Join(dir, "member", "snap", "db")
	f, err := os.Open(db) //nolint:gosec // G304: in the operator's --data-dir
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("--data-dir %s is in use by another process (it has %s open: an etcd, or an older v2bridge): "+
			"stop it or give another --data-dir", dir, db)
	}
	return nil
}
