package broker

import (
	"errors"
	"math"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// TestPersistUnencodableRecord is issue 11 item 1: a record JSON cannot
// hold at all is an error reply (541), never a panic.
func TestPersistUnencodableRecord(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	op := putOp(DefKindPolicies, "k", map[string]any{"definition": map[string]any{"x": math.NaN()}})
	if op.err == nil {
		t.Fatal("putOp: no error for a NaN")
	}
	b.persistMu.Lock()
	err := b.writeOpsLocked([]defOp{op})
	b.persistMu.Unlock()
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.InternalError {
		t.Fatalf("writing an unencodable record: %v, want a 541", err)
	}
	if _, ok := s.data[DefKindPolicies]["k"]; ok {
		t.Error("an unencodable record was written")
	}
}
