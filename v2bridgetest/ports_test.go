// SPDX-License-Identifier: Apache-2.0

package v2bridgetest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestMain lets the tests start members in child processes.
func TestMain(m *testing.M) {
	MemberMain()
	os.Exit(m.Run())
}

// TestMemberStartReportsPortTaken: a member whose port another process took
// fails to start with an error that PortTaken recognizes, in this process
// and in a child process (whose error carries its output), so that
// StartCluster starts it again on fresh ports.
func TestMemberStartReportsPortTaken(t *testing.T) {
	starts := []struct {
		name  string
		start func(memberSpec) error
	}{
		{"in process", func(s memberSpec) error {
			e, err := startInProcess(s)
			if err == nil {
				e.Close()
			}
			return err
		}},
		{"child process", func(s memberSpec) error {
			p, err := startMemberProcess(s)
			if err == nil {
				p.kill()
			}
			return err
		}},
	}
	for _, tc := range starts {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "child process" && !childMembers {
				t.Skip("no members in child processes on this system")
			}
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = taken.Close() }()
			peer := FreeURL(t)
			spec := memberSpec{Name: "m0", Dir: filepath.Join(t.TempDir(), "m0"), ClientURL: "http://" + taken.Addr().String(),
				PeerURL: peer, AdvertisePeerURL: peer, InitialCluster: "m0=" + peer, LogLevel: "error"}
			err = tc.start(spec)
			t.Logf("start error: %v", err)
			if !PortTaken(err) {
				t.Fatalf("a member on a taken port: %v; want an error PortTaken recognizes", err)
			}
		})
	}
}

// fatalTB records the first Fatal and stops the calling goroutine's work by
// panicking, as t.Fatal would by exiting it.
type fatalTB struct {
	TB
	msg string
}

type fatalPanic struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatalPanic{})
}

func TestRetryPortTaken(t *testing.T) {
	taken := fmt.Errorf("listen tcp 127.0.0.1:1: bind: address already in use")
	other := errors.New("no such file")
	cases := []struct {
		name      string
		errs      []error // what start returns, call after call (nil after the last)
		wantCalls int
		wantFatal bool
	}{
		{"succeeds at once", nil, 1, false},
		{"retries a port taken until it succeeds", []error{taken, taken}, 3, false},
		{"fails at once on another error", []error{other}, 1, true},
		{"gives up after five ports taken", []error{taken, taken, taken, taken, taken, taken}, maxPortAttempts, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := &fatalTB{}
			calls := 0
			func() {
				defer func() {
					if r := recover(); r != nil && r != (fatalPanic{}) {
						panic(r)
					}
				}()
				RetryPortTaken(tb, "start", func() error {
					calls++
					if calls <= len(tc.errs) {
						return tc.errs[calls-1]
					}
					return nil
				})
			}()
			if calls != tc.wantCalls || (tb.msg != "") != tc.wantFatal {
				t.Errorf("%d calls, fatal %q; want %d calls, fatal: %v", calls, tb.msg, tc.wantCalls, tc.wantFatal)
			}
		})
	}
}
