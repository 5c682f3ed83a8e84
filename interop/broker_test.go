package interop

import (
	"testing"

	"github.com/warrenmq/warren/warrentest"
)

// startWarren starts an in-process Warren broker for t and returns its URL.
func startWarren(t *testing.T) string {
	t.Helper()
	return warrentest.Start(t).URL()
}
