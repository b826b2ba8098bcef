// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

// sharedCluster is a one-member cluster holding a Kubernetes-like registry
// (with a secret stored as Kubernetes does, in protobuf) and nothing of
// flannel yet.
func sharedCluster(t *testing.T) (*v2bridgetest.Cluster, string) {
	cl := v2bridgetest.StartCluster(t, 1)
	v3 := cl.Client(t)
	loadRegistry(t, v3, 300, "pod")
	const protobuf = "k8s\x00\x0a\x8f\xff-protobuf" // not UTF-8, as Kubernetes stores its objects
	if _, err := v3.Put(ctxT(t, 10*time.Second), "/registry/secrets/kube-system/admin-token", protobuf); err != nil {
		t.Fatal(err)
	}
	return cl, protobuf
}

// reachesOnlyFlannel checks a bridge at u as a local process would use it:
// flannel's keys are served, another tenant's are not there, read or
// written (error 100), and stay as they were.
func reachesOnlyFlannel(t *testing.T, cl *v2bridgetest.Cluster, u, stored string) {
	t.Helper()
	if r := do(t, "PUT", u, "/v2/keys/coreos.com/network/config", form("value", `{"Network":"10.5.0.0/16"}`)); r.status != 201 && r.status != 200 {
		t.Fatalf("PUT flannel's config: %d %s", r.status, r.body)
	}
	const secret = "/registry/secrets/kube-system/admin-token"
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		r := do(t, method, u, "/v2/keys"+secret, form("value", "overwritten"))
		want := `{"errorCode":100,"message":"Key not found","cause":"` + secret +
			` is outside the served prefix /coreos.com/network (--serve-prefix)","index":0}` + "\n"
		if r.status != 404 || r.body != want {
			t.Errorf("%s %s: %d %s\nwant 404 %s", method, secret, r.status, r.body, want)
		}
	}
	got, err := cl.Client(t).Get(ctxT(t, 10*time.Second), secret)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != stored {
		t.Errorf("the secret after the attempts: %v %v", got, err)
	}
}

// TestDocumentedDeploymentsReachOnlyFlannel starts the bridge as each
// documented deployment starts it — the systemd unit with its config file,
// docs/flannel.md's config, the DaemonSet's environment on the image's — on
// a cluster Kubernetes shares, and reads and writes a Kubernetes secret
// through it. Only the settings that name this machine change: endpoints,
// URLs, and the client certificates (the test cluster is plain HTTP).
func TestDocumentedDeploymentsReachOnlyFlannel(t *testing.T) {
	cl, stored := sharedCluster(t)
	dir := t.TempDir()
	local := func(settings map[string]any) (string, map[string]any) {
		u := v2bridgetest.FreeURL(t)
		for _, k := range []string{"cacert", "cert", "key"} {
			delete(settings, k)
		}
		settings["endpoints"] = cl.Endpoints()
		settings["listen-client-urls"], settings["advertise-client-urls"] = u, u
		settings["listen-metrics-urls"] = v2bridgetest.FreeURL(t)
		return u, settings
	}
	// The unit runs `v2bridge --config-file /etc/v2bridge/v2bridge.yaml`.
	unit := readFile(t, "../contrib/systemd/v2bridge.service")
	exec := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/v2bridge (.*)$`).FindStringSubmatch(unit)
	if exec == nil || exec[1] != "--config-file /etc/v2bridge/v2bridge.yaml" {
		t.Fatalf("the unit's ExecStart changed: %q", exec)
	}
	flannelDoc := readFile(t, "../docs/flannel.md")
	block := regexp.MustCompile("(?s)```\n# /etc/v2bridge/v2bridge.yaml\n(.*?)```").FindStringSubmatch(flannelDoc)
	if block == nil {
		t.Fatal("docs/flannel.md has no /etc/v2bridge/v2bridge.yaml block")
	}
	for _, c := range []struct{ name, config string }{
		{"contrib/systemd", readFile(t, "../contrib/systemd/v2bridge.yaml")},
		{"docs/flannel.md", block[1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			var settings map[string]any
			if err := yaml.Unmarshal([]byte(c.config), &settings); err != nil {
				t.Fatal(err)
			}
			var u string
			startHealthyBridge(t, func() (string, []string, []string) {
				var s map[string]any
				u, s = local(settings)
				b, err := yaml.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, strings.ReplaceAll(c.name, "/", "-")+".yaml")
				if err := os.WriteFile(file, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return u, nil, []string{"--config-file", file}
			})
			reachesOnlyFlannel(t, cl, u, stored)
		})
	}
	t.Run("contrib/kubernetes", func(t *testing.T) {
		env := daemonSetEnv(t, cl.Endpoints())
		var u string
		startHealthyBridge(t, func() (string, []string, []string) {
			u = v2bridgetest.FreeURL(t)
			e := append(append([]string{}, env...), "V2BRIDGE_LISTEN_CLIENT_URLS="+u, "V2BRIDGE_ADVERTISE_CLIENT_URLS="+u,
				"V2BRIDGE_LISTEN_METRICS_URLS="+v2bridgetest.FreeURL(t))
			return u, e, nil
		})
		reachesOnlyFlannel(t, cl, u, stored)
	})
}

// daemonSetEnv is the environment the DaemonSet's container gets, on the
// image's (Dockerfile's ENV), without the settings the test sets itself:
// its URLs and certificates.
func daemonSetEnv(t *testing.T, endpoints []string) []string {
	t.Helper()
	var env []string
	df := readFile(t, "../Dockerfile")
	for _, m := range regexp.MustCompile(`(V2BRIDGE_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(df, -1) {
		env = append(env, m[1]+"="+m[2])
	}
	docs := bytes.Split([]byte(readFile(t, "../contrib/kubernetes/v2bridge-daemonset.yaml")), []byte("\n---\n"))
	type envVar struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			ConfigMapKeyRef *struct{ Key string }       `json:"configMapKeyRef"`
			FieldRef        *struct{ FieldPath string } `json:"fieldRef"`
		} `json:"valueFrom"`
	}
	var ds struct {
		Kind string `json:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Env []envVar `json:"env"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	for _, d := range docs {
		if err := yaml.Unmarshal(d, &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Kind == "DaemonSet" {
			break
		}
	}
	if ds.Kind != "DaemonSet" || len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("no DaemonSet with one container in contrib/kubernetes/v2bridge-daemonset.yaml")
	}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		switch {
		case strings.HasSuffix(e.Name, "_URLS") || e.Name == "V2BRIDGE_CACERT" || e.Name == "V2BRIDGE_CERT" || e.Name == "V2BRIDGE_KEY":
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Key == "endpoints":
			env = append(env, e.Name+"="+strings.Join(endpoints, ","))
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env = append(env, e.Name+"=node-1")
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("%s: a source the test does not know", e.Name)
		}
	}
	return env
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBridgeServingEverythingRefusesAnotherTenantsCluster: left at its
// default (/), a bridge over a cluster holding keys no v2 client wrote
// refuses to start, naming the flag and what it found; asked for / by
// name, it starts and says what it reaches, once.
func TestBridgeServingEverythingRefusesAnotherTenantsCluster(t *testing.T) {
	cl, _ := sharedCluster(t)
	endpoints := strings.Join(cl.Endpoints(), ",")
	u := v2bridgetest.FreeURL(t)
	p := startBridgeProcess(t, nil, "--endpoints", endpoints, "--listen-client-urls", u, "--log-level", "warn")
	select {
	case err := <-p.done:
		p.done <- err
		want := "v2bridge: refusing to serve the whole key space: --serve-prefix is / by default, and the cluster holds 301 keys " +
			"no v2 client wrote, under /registry (301 keys); any client of this bridge could read and overwrite them. Set " +
			"--serve-prefix to the v2 subtrees your clients use (flannel: --serve-prefix /coreos.com/network), or " +
			"--serve-prefix / to serve everything\n"
		if code := p.cmd.ProcessState.ExitCode(); code != 2 || !strings.HasSuffix(p.logs.String(), want) {
			t.Errorf("exit %d, output:\n%s\nwant exit 2 ending\n%s", code, p.logs, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the bridge did not refuse:\n%s", p.logs)
	}

	var url string
	p = startHealthyBridge(t, func() (string, []string, []string) {
		url = v2bridgetest.FreeURL(t)
		return url, nil, []string{"--endpoints", endpoints, "--listen-client-urls", url, "--log-level", "warn", "--serve-prefix", "/"}
	})
	if r := do(t, "GET", url, "/v2/keys/registry/pods/default/pod-00000", nil); r.status != 200 {
		t.Errorf("serving / by name: %d %s", r.status, r.body)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // its log is read once it has exited
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("no exit on SIGTERM")
	}
	logs := p.logs.String()
	if n := strings.Count(logs, "serving the whole key space (--serve-prefix /)"); n != 1 ||
		!strings.Contains(logs, `"keys": 301`) && !strings.Contains(logs, `"keys":301`) {
		t.Errorf("want one warning naming 301 keys, logs:\n%s", logs)
	}
}
