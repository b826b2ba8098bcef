// SPDX-License-Identifier: Apache-2.0

//go:build unix

package v2bridgetest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// childMembers: StartProcessCluster works on this system.
const childMembers = true

// memberEnv carries a child process's memberSpec (JSON).
const memberEnv = "V2BRIDGETEST_MEMBER"

// StartProcessCluster is StartCluster with every member in a child process
// of its own, so that a test can freeze one (Freeze, Thaw) or kill it (Kill)
// as it would a machine. The child is this test binary run again, which
// needs MemberMain at the top of the package's TestMain:
//
//	func TestMain(m *testing.M) {
//		v2bridgetest.MemberMain()
//		os.Exit(m.Run())
//	}
//
// The children are killed when the test ends, and (on Linux) when this
// process dies. Under V2BRIDGE_TEST_ETCD the children run that etcd binary
// instead, and need no MemberMain.
func StartProcessCluster(t TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, true, MemberLimits{}, "")
}

// StartProcessClusterIn is StartProcessCluster with the members' data
// directories under dir (a slow disk's mount, say) instead of a temporary
// directory; the caller removes them.
func StartProcessClusterIn(t TB, n int, dir string) *Cluster {
	t.Helper()
	return startCluster(t, n, true, MemberLimits{}, dir)
}

// PID is the process id of member i, which runs in a child process
// (StartProcessCluster).
func (c *Cluster) PID(i int) int {
	c.t.Helper()
	return c.process(i, "PID").cmd.Process.Pid
}

// MemberMain returns at once, unless this process was started by
// StartProcessCluster to be an etcd member: then it runs the member until its
// parent goes away, and exits.
func MemberMain() {
	spec := os.Getenv(memberEnv)
	if spec == "" {
		return
	}
	os.Exit(runMember(spec))
}

func runMember(js string) int {
	var spec memberSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", memberEnv, err)
		return 2
	}
	cfg, err := spec.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start %s: %v\n", spec.Name, err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "%s failed: %v\n", spec.Name, err)
		return 1
	case <-time.After(60 * time.Second):
		fmt.Fprintf(os.Stderr, "%s not ready after 60s\n", spec.Name)
		return 1
	}
	fmt.Println(readyLine)
	// The parent holds our stdin open for as long as it wants us.
	parentGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(parentGone)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case <-parentGone:
	case <-sig:
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "%s: %v\n", spec.Name, err)
	}
	e.Close()
	return 0
}

const readyLine = "v2bridgetest member ready"

// memberProcess is a member running in a child process.
type memberProcess struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr *tailBuffer
	exited chan struct{}
	frozen atomic.Bool
	mu     sync.Mutex // serializes signals with reaping
}

// startMemberProcess starts the member spec describes in a child process:
// this test binary run again (MemberMain), or etcd's own binary under
// V2BRIDGE_TEST_ETCD.
func startMemberProcess(spec memberSpec) (*memberProcess, error) {
	external := ExternalEtcd()
	var cmd *exec.Cmd
	if external != "" {
		cmd = exec.Command(external, spec.etcdFlags()...)
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		js, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		// Without MemberMain in TestMain the child runs no test and exits.
		cmd = exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), memberEnv+"="+string(js))
	}
	cmd.SysProcAttr = memberSysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of our own (not StdoutPipe), so reaping the child never races
	// with reading what it printed.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	p := &memberProcess{cmd: cmd, stdin: stdin, stderr: &tailBuffer{max: 16 << 10}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		close(p.exited)
		p.mu.Unlock()
	}()
	ready := make(chan bool, 1)
	stop := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		// Read to the end (the child exiting), so that the child never
		// blocks on, or dies of, a full or closed stdout.
		defer func() { _ = r.Close() }()
		if external == "" {
			found := false
			for sc := bufio.NewScanner(r); !found && sc.Scan(); {
				found = sc.Text() == readyLine
			}
			ready <- found
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	if external != "" {
		go func() {
			defer close(probed)
			ready <- awaitHealthy(spec.ClientURL, p.exited, stop)
		}()
	} else {
		close(probed)
	}
	defer func() {
		close(stop)
		<-probed
	}()
	how := "(child process)"
	if external != "" {
		how = "(" + external + ")"
	}
	select {
	case ok := <-ready:
		if ok {
			return p, nil
		}
		<-p.exited
		hint := " (is v2bridgetest.MemberMain() the first call in TestMain?)"
		if external != "" {
			hint = ""
		}
		return nil, fmt.Errorf("member %s %s exited before serving%s: %s; output: %s", spec.Name, how, hint,
			cmd.ProcessState, strings.TrimSpace(p.stderr.String()))
	case <-time.After(90 * time.Second):
		p.kill()
		return nil, fmt.Errorf("member %s %s not ready after 90s; output: %s", spec.Name, how,
			strings.TrimSpace(p.stderr.String()))
	}
}

// awaitHealthy polls the /health endpoint of an etcd member at clientURL
// until it reports healthy (true), or the member exits or stop closes
// (false).
func awaitHealthy(clientURL string, exited, stop <-chan struct{}) bool {
	// No connection kept: nothing of the probe outlives it.
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		resp, err := hc.Get(clientURL + "/health")
		if err == nil {
			var h struct {
				Health string `json:"health"`
			}
			err = json.NewDecoder(resp.Body).Decode(&h)
			_ = resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && h.Health == "true" {
				return true
			}
		}
		select {
		case <-exited:
			return false
		case <-stop:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// signal sends sig unless the child has been reaped (its pid may be reused).
func (p *memberProcess) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return errors.New("member process has exited")
	default:
	}
	return p.cmd.Process.Signal(sig)
}

func (p *memberProcess) freeze() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.frozen.Store(true)
	// The signal is asynchronous: wait until the kernel shows it stopped.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, ok := procState(p.cmd.Process.Pid); !ok || st == 'T' {
			return nil
		}
	}
	return errors.New("member process did not stop")
}

func (p *memberProcess) thaw() {
	if p.frozen.Swap(false) {
		_ = p.signal(syscall.SIGCONT)
	}
}

func (p *memberProcess) kill() {
	_ = p.stdin.Close()
	_ = p.signal(syscall.SIGKILL)
	<-p.exited
	p.frozen.Store(false)
}

// procState is the process state letter from /proc (Linux); ok is false
// where there is no /proc.
func procState(pid int) (byte, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
