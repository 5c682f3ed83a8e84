package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The bench's processes and their waiters end with each test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
