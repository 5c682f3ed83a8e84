package integration

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// jHist builds hand-made histories for the checker's tests: times are
// seconds after t0.
type jHist struct {
	h  jHistory
	t0 time.Time
}

func newJHist(dlq string) *jHist {
	t0 := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	return &jHist{h: jHistory{Source: "src", DLQ: dlq, Begin: t0, Broken: map[int]time.Time{}}, t0: t0}
}

func (j *jHist) at(s float64) time.Time { return j.t0.Add(time.Duration(s * float64(time.Second))) }

func (j *jHist) pub(id string, out jOutcome, sent, done float64) *jHist {
	j.h.Pubs = append(j.h.Pubs, jPub{ID: id, Sent: j.at(sent), Done: j.at(done), Outcome: out})
	return j
}

func (j *jHist) del(queue, id string, at float64, redelivered bool, act jAction) *jHist {
	j.h.Dels = append(j.h.Dels, jDel{ID: id, Queue: queue, Conn: 1, At: j.at(at), Redelivered: redelivered, Action: act})
	return j
}

func (j *jHist) fault(kind string, start, end float64) *jHist {
	j.h.Faults = append(j.h.Faults, jFault{Kind: kind, Target: "warren@n1", Start: j.at(start), End: j.at(end)})
	return j
}

// failing returns the report's failures joined, "" if none.
func (j *jHist) check() (*jReport, string) {
	r := checkJepsen(j.h)
	return r, strings.Join(r.Failures(), "\n")
}

// TestJepsenCheckerClean: issue 14, must-show 1 (the checker): a history
// where every confirmed message is consumed once, a requeued one comes
// back redelivered, a nacked and a returned (unroutable) one are never
// seen and an unknown one is consumed, passes with the right counts.
func TestJepsenCheckerClean(t *testing.T) {
	j := newJHist("").
		pub("a", jConfirmed, 1, 1.1).pub("b", jConfirmed, 1, 1.2).pub("c", jNacked, 2, 2.1).pub("d", jUnknown, 3, 3).pub("e", jReturned, 3, 3.1).
		del("src", "a", 2, false, jAck).
		del("src", "b", 2, false, jRequeue).del("src", "b", 3, true, jAck).
		del("src", "d", 4, false, jAck)
	r, fails := j.check()
	if fails != "" {
		t.Fatalf("a correct history fails: %s", fails)
	}
	if r.Published != 5 || r.Confirmed != 2 || r.Nacked != 1 || r.Unknown != 1 || r.Returned != 1 || r.Consumed != 3 || r.Deliveries != 4 ||
		r.Requeued != 1 || r.Redeliveries != 1 || r.Duplicates != 0 || r.UnknownConsumed != 1 {
		t.Fatalf("counts: %+v", r)
	}
}

// TestJepsenCheckerLost: issue 14, must-show 1 (the checker): a confirmed
// message never consumed is lost, and so is one whose only ack failed to
// be sent, or whose only delivery was requeued and never came back.
func TestJepsenCheckerLost(t *testing.T) {
	j := newJHist("").
		pub("a", jConfirmed, 1, 1.1).pub("b", jConfirmed, 1, 1.2).pub("c", jConfirmed, 1, 1.3).pub("d", jConfirmed, 1, 1.4).
		del("src", "a", 2, false, jAck).
		del("src", "c", 2, false, jRequeue)
	j.h.Dels = append(j.h.Dels, jDel{ID: "d", Queue: "src", At: j.at(2), Action: jAck, SettleFailed: true})
	r, fails := j.check()
	if !slices.Equal(r.Lost, []string{"b", "c", "d"}) {
		t.Fatalf("lost = %v, want [b c d]", r.Lost)
	}
	if !strings.Contains(fails, "3 lost") {
		t.Fatalf("failures %q do not report the lost messages", fails)
	}
}

// TestJepsenCheckerUnexpected: issue 14, must-show 1 (the checker): a
// consumed id nobody published is reported.
func TestJepsenCheckerUnexpected(t *testing.T) {
	j := newJHist("").pub("a", jConfirmed, 1, 1.1).
		del("src", "a", 2, false, jAck).del("src", "zz", 2, false, jAck)
	r, fails := j.check()
	if !slices.Equal(r.Unexpected, []string{"zz"}) || !strings.Contains(fails, "1 unexpected") {
		t.Fatalf("unexpected = %v, failures %q", r.Unexpected, fails)
	}
}

// TestJepsenCheckerDuplicates: issue 14, must-show 1 (the checker): a
// message delivered again after an ack is a duplicate; with
// redelivered=true and the ack close to a fault (or on a connection that
// failed later) it passes and is counted as "ack possibly lost"; far from
// any fault it passes but is listed; without redelivered=true it fails.
func TestJepsenCheckerDuplicates(t *testing.T) {
	j := newJHist("").fault("kill", 10, 15).
		pub("a", jConfirmed, 1, 1.1).pub("b", jConfirmed, 1, 1.2).pub("c", jConfirmed, 1, 1.3).
		del("src", "a", 9, false, jAck).del("src", "a", 16, true, jAck). // ack 1 s before the kill
		del("src", "b", 50, false, jAck).del("src", "b", 51, true, jAck) // far from the fault
	j.h.Dels = append(j.h.Dels, jDel{ID: "c", Queue: "src", Conn: 7, At: j.at(60), Action: jAck},
		jDel{ID: "c", Queue: "src", Conn: 8, At: j.at(62), Redelivered: true, Action: jAck})
	j.h.Broken[7] = j.at(61) // c's ack went on a connection that then failed
	r, fails := j.check()
	if fails != "" {
		t.Fatalf("redelivered duplicates fail: %s", fails)
	}
	if r.Duplicates != 3 || r.DupRedelivered != 3 || r.DupAckAtRisk != 2 || len(r.DupUnexplained) != 1 || !strings.HasPrefix(r.DupUnexplained[0], "b ") {
		t.Fatalf("counts: duplicates %d redelivered %d at risk %d unexplained %v", r.Duplicates, r.DupRedelivered, r.DupAckAtRisk, r.DupUnexplained)
	}
	if !strings.Contains(r.String(), "ack possibly lost") {
		t.Fatalf("the summary does not explain the duplicates:\n%s", r)
	}

	j = newJHist("").fault("kill", 10, 15).pub("a", jConfirmed, 1, 1.1).
		del("src", "a", 9, false, jAck).del("src", "a", 16, false, jAck)
	r, fails = j.check()
	if len(r.NotRedelivered) != 1 || !strings.Contains(fails, "without redelivered=true") {
		t.Fatalf("a duplicate without redelivered passes: %+v, failures %q", r, fails)
	}
	// A second unflagged delivery is a broker-made copy even without an ack.
	j = newJHist("").pub("a", jConfirmed, 1, 1.1).
		del("src", "a", 2, false, jNone).del("src", "a", 3, false, jAck)
	if _, fails = j.check(); !strings.Contains(fails, "without redelivered=true") {
		t.Fatalf("a second delivery with redelivered=false passes: %q", fails)
	}
	// The old leader's first delivery passed on after the new leader's
	// redelivery: one unflagged delivery, no copy.
	j = newJHist("").fault("pause", 10, 15).pub("a", jConfirmed, 1, 1.1).
		del("src", "a", 12, true, jAck).del("src", "a", 16, false, jAck)
	if r, fails = j.check(); fails != "" || r.Duplicates != 1 {
		t.Fatalf("a first delivery received after the redelivery: failures %q, duplicates %d", fails, r.Duplicates)
	}
}

// TestJepsenCheckerDeadLetter: issue 14, must-show 1 (the checker, DLQ
// variant): lost is computed over both queues (a rejected message must be
// consumed from the DLQ); a DLQ message never rejected is reported; a
// dead letter published twice (fresh copies) passes only within a fault.
func TestJepsenCheckerDeadLetter(t *testing.T) {
	j := newJHist("dlq").fault("pause", 10, 15).
		pub("a", jConfirmed, 1, 1.1).pub("b", jConfirmed, 1, 1.2).pub("c", jConfirmed, 1, 1.3).pub("d", jConfirmed, 1, 1.4).
		del("src", "a", 2, false, jReject).del("dlq", "a", 3, false, jAck).
		del("src", "b", 9, false, jReject).del("dlq", "b", 9.5, false, jAck).del("dlq", "b", 17, false, jAck). // re-dead-lettered
		del("src", "c", 2, false, jAck).
		del("src", "d", 2, false, jAck)
	r, fails := j.check()
	if fails != "" || r.Redeadlettered != 1 || r.Rejected != 2 || r.Consumed != 4 {
		t.Fatalf("failures %q, report %+v", fails, r)
	}

	j = newJHist("dlq").
		pub("a", jConfirmed, 1, 1.1).pub("b", jConfirmed, 1, 1.2).pub("c", jConfirmed, 1, 1.3).
		del("src", "a", 2, false, jReject).                                                                  // never reached the DLQ: lost
		del("src", "b", 2, false, jReject).del("dlq", "b", 3, false, jAck).del("dlq", "b", 40, false, jAck). // twice, no fault
		del("src", "c", 2, false, jAck).del("dlq", "c", 3, false, jAck)                                      // in the DLQ, never rejected
	r, fails = j.check()
	if !slices.Equal(r.Lost, []string{"a"}) || len(r.NotRedelivered) != 1 || !slices.Equal(r.DeadLetteredUnrejected, []string{"c"}) {
		t.Fatalf("lost %v, not redelivered %v, dead-lettered without reject %v", r.Lost, r.NotRedelivered, r.DeadLetteredUnrejected)
	}
	for _, want := range []string{"1 lost", "1 dead-lettered without a reject", "1 delivered again without redelivered=true"} {
		if !strings.Contains(fails, want) {
			t.Fatalf("failures %q lack %q", fails, want)
		}
	}
}

// TestJepsenCheckerRecovery: issue 14, must-show 1 (the checker): each
// fault's first confirm after its start and time to recover after its
// end.
func TestJepsenCheckerRecovery(t *testing.T) {
	j := newJHist("").fault("kill", 10, 20).fault("cut", 30, 35).
		pub("z", jConfirmed, 9.5, 10.1). // sent before the kill: not a sign of availability
		pub("a", jConfirmed, 11, 12.5).pub("b", jConfirmed, 19, 21).pub("c", jConfirmed, 21, 22.25).pub("d", jConfirmed, 36, 37)
	r := checkJepsen(j.h)
	if len(r.Faults) != 2 {
		t.Fatalf("faults: %+v", r.Faults)
	}
	if f := r.Faults[0]; f.FirstConfirm != 2500*time.Millisecond || f.Recovered != 2250*time.Millisecond {
		t.Fatalf("kill: first confirm %v, recovered %v; want 2.5s, 2.25s", f.FirstConfirm, f.Recovered)
	}
	if f := r.Faults[1]; f.FirstConfirm != -1 || f.Recovered != 2*time.Second {
		t.Fatalf("cut: first confirm %v, recovered %v; want none, 2s", f.FirstConfirm, f.Recovered)
	}
}

// TestJepsenCheckerExpiring: issue 22, must-show 3 (the checker): the
// messages of the expiring sources arrive in the DLQ without a reject;
// one arriving again unflagged fails even during a fault (a paused
// leader's copy); a confirmed one that never arrives is lost under
// at-least-once and counted as dropped under at-most-once.
func TestJepsenCheckerExpiring(t *testing.T) {
	exp := func() *jHist {
		j := newJHist("dlq").fault("pause-expiring", 2, 10)
		j.h.Expiring = map[string]string{"amo": "at-most-once", "alo": "at-least-once"}
		return j
	}
	xpub := func(j *jHist, id, q string) *jHist {
		j.h.Pubs = append(j.h.Pubs, jPub{ID: id, Queue: q, Sent: j.at(1), Done: j.at(1.1), Outcome: jConfirmed})
		return j
	}
	j := exp()
	xpub(j, "x1", "amo")
	xpub(j, "x2", "alo")
	xpub(j, "x3", "alo")
	j.del("dlq", "x1", 5, false, jAck).
		del("dlq", "x2", 5, false, jAck).
		del("dlq", "x3", 5, false, jNone).del("dlq", "x3", 11, true, jAck) // flagged: fine
	r, fails := j.check()
	if fails != "" || r.Expired != 3 || r.ExpiredArrived != 3 || len(r.DeadLetteredUnrejected) != 0 {
		t.Fatalf("a correct history: failures %q, report %+v", fails, r)
	}

	j = exp()
	xpub(j, "x1", "amo")
	xpub(j, "x2", "alo")
	xpub(j, "x3", "alo")
	xpub(j, "x4", "amo")
	j.del("dlq", "x1", 5, false, jAck).del("dlq", "x1", 9, false, jAck). // copied in the fault, unflagged
										del("dlq", "x2", 5, false, jAck)
	// x3 (at-least-once) never arrives: lost; x4 (at-most-once): dropped.
	r, fails = j.check()
	if !slices.Equal(r.Lost, []string{"x3"}) || len(r.NotRedelivered) != 1 || r.ExpiredDropped != 1 || r.Redeadlettered != 0 {
		t.Fatalf("lost %v, not redelivered %v, dropped %d, re-dead-lettered %d", r.Lost, r.NotRedelivered, r.ExpiredDropped, r.Redeadlettered)
	}
	for _, want := range []string{"1 lost", "1 delivered again without redelivered=true"} {
		if !strings.Contains(fails, want) {
			t.Fatalf("failures %q lack %q", fails, want)
		}
	}
}
