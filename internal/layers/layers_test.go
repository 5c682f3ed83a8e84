// Package layers holds the layering test (issue 23): the packages of the
// module in layers, as docs/architecture.md draws them, and a test that
// fails when a package imports one of a layer above its own (or one the
// drawing does not place).
package layers

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/warrenmq/warren/"

// readLayers reads the ```layers block of docs/architecture.md: one layer
// a line, the highest first; a name ending in /... stands for every
// package under it.
func readLayers(t *testing.T, root string) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var layers [][]string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```layers":
			in = true
		case in && line == "```":
			in = false
		case in && line != "":
			layers = append(layers, strings.Fields(line))
		}
	}
	if len(layers) < 2 {
		t.Fatal("docs/architecture.md has no ```layers block of two layers or more")
	}
	return layers
}

// rankOf returns the layer of pkg (0 the lowest), -1 if unplaced.
func rankOf(layers [][]string, pkg string) int {
	for i, layer := range layers {
		for _, p := range layer {
			if p == pkg || strings.HasSuffix(p, "/...") && strings.HasPrefix(pkg+"/", strings.TrimSuffix(p, "...")) {
				return len(layers) - 1 - i
			}
		}
	}
	return -1
}

// check returns the violations of imports (package -> the module's
// packages it imports) against layers.
func check(layers [][]string, imports map[string][]string) []string {
	var bad []string
	for pkg, imps := range imports {
		r := rankOf(layers, pkg)
		if r < 0 {
			bad = append(bad, fmt.Sprintf("%s is in no layer of docs/architecture.md", pkg))
			continue
		}
		for _, imp := range imps {
			if ri := rankOf(layers, imp); ri >= r {
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d): not below it", pkg, r, imp, ri))
			}
		}
	}
	return bad
}

// TestLayering: issue 23. Every package of the module is in a layer of
// docs/architecture.md and imports only packages of layers below its own.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	layers := readLayers(t, root)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		imports[pkg] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	if len(imports) < 20 {
		t.Fatalf("go list found %d packages: not the module", len(imports))
	}
	for _, v := range check(layers, imports) {
		t.Error(v)
	}
}

// TestLayeringCatches: the check itself: an upward import and an unplaced
// package are caught, a downward import is not.
func TestLayeringCatches(t *testing.T) {
	layers := [][]string{{"cmd/..."}, {"server"}, {"broker", "store"}}
	if bad := check(layers, map[string][]string{"server": {"broker"}, "cmd/warren": {"server", "store"}}); len(bad) != 0 {
		t.Fatalf("downward imports refused: %v", bad)
	}
	bad := check(layers, map[string][]string{"broker": {"server"}, "store": {"broker"}, "mgmt": nil})
	if len(bad) != 3 {
		t.Fatalf("want 3 violations (up, same layer, unplaced), got %v", bad)
	}
}
