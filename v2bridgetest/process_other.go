// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package v2bridgetest

import (
	"errors"
	"sync/atomic"
)

// StartProcessCluster needs Unix signals (SIGSTOP, SIGCONT): elsewhere it
// skips the test.
func StartProcessCluster(t TB, n int) *Cluster {
	t.Helper()
	t.Skip("v2bridgetest: members in child processes need a Unix system")
	return nil
}

// StartProcessClusterIn skips the test, as StartProcessCluster does.
func StartProcessClusterIn(t TB, n int, _ string) *Cluster { return StartProcessCluster(t, n) }

// PID fails the test: no member runs in a child process here.
func (c *Cluster) PID(i int) int {
	c.t.Helper()
	c.t.Fatalf("PID: member %d runs in this process", i)
	return 0
}

// childMembers: StartProcessCluster works on this system.
const childMembers = false

// MemberMain does nothing on this system.
func MemberMain() {}

type memberProcess struct{ frozen atomic.Bool }

func startMemberProcess(memberSpec) (*memberProcess, error) {
	return nil, errors.New("v2bridgetest: members in child processes need a Unix system")
}
func (p *memberProcess) freeze() error { return errors.New("not supported") }
func (p *memberProcess) thaw()         {}
func (p *memberProcess) kill()         {}
