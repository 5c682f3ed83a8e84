package broker

import (
	"fmt"
	"slices"
	"testing"
)

// issue 14, rebalance: RebalancePlan evens the leaders out as RabbitMQ's
// rabbit_amqqueue:rebalance does (at most ceil(queues/nodes) per node,
// moves only to running members under that), leaving alone queues that
// do not match the patterns, single-member and unreplicated queues.
func TestRebalancePlan(t *testing.T) {
	all := []string{"a", "b", "c"}
	qq := func(name, leader string, members ...string) QuorumMembership {
		return QuorumMembership{VHost: "/", Name: name, Leader: leader, Members: members, Replicated: true}
	}
	moves := func(ms []LeaderMove) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s:%s->%s", m.Name, m.From, m.To))
		}
		return out
	}
	for _, tc := range []struct {
		what     string
		queues   []QuorumMembership
		running  []string
		vp, qp   string
		want     []string
		wantLead map[string]int
	}{
		{"three on one node", []QuorumMembership{qq("q1", "a", all...), qq("q2", "a", all...), qq("q3", "a", all...)}, all, ".*", ".*",
			nil, map[string]int{"a": 1, "b": 1, "c": 1}},
		{"already even", []QuorumMembership{qq("q1", "a", all...), qq("q2", "b", all...), qq("q3", "c", all...)}, all, ".*", ".*",
			[]string{}, nil},
		{"a node down takes none", []QuorumMembership{qq("q1", "a", all...), qq("q2", "a", all...), qq("q3", "a", all...), qq("q4", "a", all...)},
			[]string{"a", "b"}, ".*", ".*", nil, map[string]int{"a": 2, "b": 2}},
		{"only to members", []QuorumMembership{qq("q1", "a", "a", "b"), qq("q2", "a", "a", "b"), qq("q3", "a", "a", "b")}, all, ".*", ".*",
			nil, map[string]int{"a": 2, "b": 1}},
		{"patterns", []QuorumMembership{qq("x1", "a", all...), qq("q2", "a", all...), {VHost: "v", Name: "q3", Leader: "a", Members: all, Replicated: true}},
			all, "^/$", "^q", []string{}, nil},
		{"single member and unreplicated stay", []QuorumMembership{qq("q1", "a", "a"), {VHost: "/", Name: "q2", Leader: "a", Members: []string{"a"}},
			qq("q3", "a", all...)}, all, ".*", ".*", []string{}, nil},
	} {
		ms, err := RebalancePlan(tc.queues, tc.running, tc.vp, tc.qp)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if tc.want != nil && !slices.Equal(moves(ms), tc.want) && !(len(ms) == 0 && len(tc.want) == 0) {
			t.Errorf("%s: moves %v, want %v", tc.what, moves(ms), tc.want)
		}
		if tc.wantLead != nil {
			lead := map[string]int{}
			leader := map[string]string{}
			for _, q := range tc.queues {
				leader[q.Name] = q.Leader
			}
			for _, m := range ms {
				if leader[m.Name] != m.From {
					t.Errorf("%s: move %v from a node that does not lead it", tc.what, m)
				}
				leader[m.Name] = m.To
			}
			for _, l := range leader {
				lead[l]++
			}
			if fmt.Sprint(lead) != fmt.Sprint(tc.wantLead) {
				t.Errorf("%s: leaders after %v: %v, want %v", tc.what, moves(ms), lead, tc.wantLead)
			}
		}
	}
	if _, err := RebalancePlan(nil, all, "(", ".*"); err == nil {
		t.Error("an invalid vhost pattern is accepted")
	}
}
