// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package modes

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestDataDirIsLockedOnceNamingItsHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, dataDirLockName))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q (%v), want this process's PID", b, err)
	}
	// flock locks belong to an open file: a second open in this process
	// conflicts as another process's would.
	want := fmt.Sprintf("--data-dir %s is in use by another process (pid %d): stop it or give another --data-dir", dir, os.Getpid())
	if _, err := lockDataDir(dir); err == nil || err.Error() != want {
		t.Fatalf("second lock: %v, want %q", err, want)
	}
	release()
	release, err = lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release()
}

func TestDataDirWhoseDatabaseIsOpenElsewhereIsRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "member", "snap", "db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	// As bbolt holds it while etcd runs.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("--data-dir %s is in use by another process (it has %s open: an etcd, or an older v2bridge): "+
		"stop it or give another --data-dir", dir, db)
	if _, err := lockDataDir(dir); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	// The refusal released v2bridge.lock.
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	release()
}
