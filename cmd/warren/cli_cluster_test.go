package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/warrenmq/warren/mgmt/api"
)

// fakeClusterAPI serves the shapes of the cluster endpoints (H5 builds
// the real ones in mgmt): a test of the CLI's client code, not of the API.
type fakeClusterAPI struct {
	mu       sync.Mutex
	members  []api.ClusterMember
	requests []string // "METHOD path body"
	noStatus bool     // answer /api/cluster-status with 404 (RabbitMQ)
	shrink   string   // the reply of a quorum shrink (a JSON array)
}

func (f *fakeClusterAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	if u, p, ok := r.BasicAuth(); !ok || u != "guest" || p != "guest" {
		w.WriteHeader(401)
		io.WriteString(w, `{"error":"not_authorised","reason":"Login failed"}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "GET" && r.URL.Path == "/api/cluster-status" && !f.noStatus:
		json.NewEncoder(w).Encode(api.ClusterStatus{Node: "warren@a", ClusterName: "warren@a", ClusterID: "c1d2", Leader: "warren@b", Members: f.members})
	case r.Method == "GET" && r.URL.Path == "/api/nodes":
		var nodes []map[string]any
		for _, m := range f.members {
			nodes = append(nodes, map[string]any{"name": m.Name, "running": m.Running, "type": "disc"})
		}
		json.NewEncoder(w).Encode(nodes)
	case r.Method == "GET" && r.URL.Path == "/api/overview":
		io.WriteString(w, `{"node":"rabbit@a","cluster_name":"rabbit@a"}`)
	case r.Method == "POST" && r.URL.Path == "/api/cluster/members":
		var m api.ClusterMember
		if err := json.Unmarshal(body, &m); err != nil || m.Name == "" || m.Address == "" {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"bad_request","reason":"want name and address"}`)
			return
		}
		f.members = append(f.members, api.ClusterMember{Name: m.Name, Address: m.Address})
		w.WriteHeader(204)
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/api/queues/quorum/replicas/on/") && strings.HasSuffix(r.URL.Path, "/shrink"):
		w.WriteHeader(202)
		io.WriteString(w, cmp.Or(f.shrink, "[]"))
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/api/cluster/members/"):
		name := strings.TrimPrefix(r.URL.Path, "/api/cluster/members/")
		for i, m := range f.members {
			if m.Name == name {
				f.members = append(f.members[:i], f.members[i+1:]...)
				w.WriteHeader(204)
				return
			}
		}
		w.WriteHeader(404)
		io.WriteString(w, `{"error":"Object Not Found","reason":"Not Found"}`)
	default:
		w.WriteHeader(404)
		io.WriteString(w, `{"error":"Object Not Found","reason":"Not Found"}`)
	}
}

func (f *fakeClusterAPI) lastRequest() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

func newFakeCluster(t *testing.T) (*fakeClusterAPI, string) {
	f := &fakeClusterAPI{members: []api.ClusterMember{
		{Name: "warren@c", Address: "h3:7003", Running: false},
		{Name: "warren@a", Address: "h1:7001", Running: true},
		{Name: "warren@b", Address: "h2:7002", Running: true, Leader: true},
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func runCLIOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	// As run does: connection flags may come before the command.
	err := runCLI(globalFirst(args), &out, &errOut)
	return out.String(), err
}

// TestCLIClusterStatus: issue 13: warren cluster status prints the
// members as rabbitmqctl cluster_status does (disk nodes, running nodes,
// leader), and --json the API's reply.
func TestCLIClusterStatus(t *testing.T) {
	f, url := newFakeCluster(t)
	out, err := runCLIOut(t, "cluster", "status", "--url", url)
	if err != nil {
		t.Fatal(err)
	}
	disk := "Disk Nodes\n\nwarren@a\nwarren@b\nwarren@c\n"
	running := "Running Nodes\n\nwarren@a\nwarren@b\n\n"
	for _, want := range []string{"Cluster status of node warren@a", "Cluster id: c1d2", "Leader: warren@b", disk, running} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	rows := parseTable(t, out[strings.Index(out, "NAME"):], "NAME")
	if r := findRow(rows, "NAME", "warren@c"); r == nil || r["RUNNING"] != "no" || r["ADDRESS"] != "h3:7003" || r["LEADER"] != "no" {
		t.Fatalf("row of warren@c: %v\n%s", r, out)
	}
	if r := findRow(rows, "NAME", "warren@b"); r == nil || r["RUNNING"] != "yes" || r["LEADER"] != "yes" {
		t.Fatalf("row of warren@b: %v\n%s", r, out)
	}
	if got := f.lastRequest(); got != "GET /api/cluster-status " {
		t.Fatalf("request %q", got)
	}

	out, err = runCLIOut(t, "--url", url, "cluster", "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st api.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Leader != "warren@b" || len(st.Members) != 3 {
		t.Fatalf("--json: %+v, %v\n%s", st, err, out)
	}

	// A broker without /api/cluster-status (RabbitMQ): from /api/nodes.
	f.mu.Lock()
	f.noStatus = true
	f.mu.Unlock()
	out, err = runCLIOut(t, "cluster", "status", "--url", url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Cluster status of node rabbit@a", disk, "Running Nodes\n\nwarren@a\nwarren@b\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status from /api/nodes lacks %q:\n%s", want, out)
		}
	}

	_, err = runCLIOut(t, "cluster", "status", "--url", url, "--password", "wrong")
	wantErr(t, err, "401", "Login failed")
	_, err = runCLIOut(t, "cluster", "status", "extra", "--url", url)
	wantErr(t, err, "usage: warren cluster status")
}

// TestCLIClusterJoinForget: issue 13: join posts the new member's name
// and address, forget deletes it; bad names and addresses are refused
// before any request; the API's errors come through.
func TestCLIClusterJoinForget(t *testing.T) {
	f, url := newFakeCluster(t)
	out, err := runCLIOut(t, "cluster", "join", "warren@d", "h4:7004", "--url", url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Added node warren@d (h4:7004)") {
		t.Fatalf("join output: %q", out)
	}
	if got := f.lastRequest(); got != `POST /api/cluster/members {"address":"h4:7004","name":"warren@d"}` {
		t.Fatalf("join request %q", got)
	}
	out, _ = runCLIOut(t, "cluster", "status", "--url", url)
	if !strings.Contains(out, "warren@d") {
		t.Fatalf("joined node not in status:\n%s", out)
	}

	n := len(f.requests)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "join", "warren@d"}, "usage: warren cluster join NAME HOST:PORT"},
		{[]string{"cluster", "join", "d", "h4:7004"}, "name@host"},
		{[]string{"cluster", "join", "warren@d", "h4"}, "HOST:PORT"},
		{[]string{"cluster", "forget"}, "usage: warren cluster forget --offline NAME"},
	} {
		_, err := runCLIOut(t, append(tc.args, "--url", url)...)
		wantErr(t, err, tc.want)
	}
	if len(f.requests) != n {
		t.Fatalf("invalid arguments sent requests: %v", f.requests[n:])
	}

	// issue 22: as rabbitmqctl forget_cluster_node, the node's quorum
	// queue replicas go too (the shrink after the removal).
	f.mu.Lock()
	f.shrink = `[{"vhost":"/","name":"q1","size":2,"result":"ok"},{"vhost":"/","name":"q2","size":2,"result":"ok"}]`
	f.mu.Unlock()
	out, err = runCLIOut(t, "cluster", "forget", "--offline", "warren@c", "--url", url)
	if err != nil || !strings.Contains(out, "Removed node warren@c") || !strings.Contains(out, "Removed its replicas from 2 quorum queues (0 failed)") {
		t.Fatalf("forget: %q, %v", out, err)
	}
	if got := f.requests[len(f.requests)-2:]; got[0] != "DELETE /api/cluster/members/warren@c?offline=true " ||
		got[1] != "DELETE /api/queues/quorum/replicas/on/warren@c/shrink " {
		t.Fatalf("forget requests %q", got)
	}
	f.mu.Lock()
	f.members = append(f.members, api.ClusterMember{Name: "warren@e", Address: "h5:7005"})
	f.shrink = `[{"vhost":"/","name":"q1","size":1,"result":"error: the last node cannot be removed"}]`
	f.mu.Unlock()
	_, err = runCLIOut(t, "cluster", "forget", "--offline", "warren@e", "--url", url)
	wantErr(t, err, "1 of its quorum queue replicas could not be removed (run 'warren queues shrink warren@e')")
	_, err = runCLIOut(t, "cluster", "forget", "--offline", "warren@c", "--url", url)
	wantErr(t, err, "404")
	_, err = runCLIOut(t, "cluster", "bogus", "--url", url)
	wantErr(t, err, "unknown subcommand")

	var help bytes.Buffer
	runCLI([]string{"help"}, &help, io.Discard)
	for _, want := range []string{"cluster status", "cluster join NAME HOST:PORT", "cluster forget --offline NAME"} {
		if !strings.Contains(help.String(), want) {
			t.Fatalf("help lacks %q:\n%s", want, help.String())
		}
	}
}
