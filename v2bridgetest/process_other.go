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
