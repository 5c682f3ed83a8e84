package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// specRules are the rule ids of shared/spec/dead-lettering.md.
var specRules = func() []string {
	var out []string
	for _, sec := range []struct {
		major, n int
	}{{1, 14}, {2, 7}, {3, 12}, {4, 7}, {5, 5}} {
		for i := 1; i <= sec.n; i++ {
			out = append(out, "R"+itoa(sec.major)+"."+itoa(i))
		}
	}
	return out
}()

func itoa(n int) string {
	if n >= 10 {
		return string(rune('0'+n/10)) + string(rune('0'+n%10))
	}
	return string(rune('0' + n))
}

// TestSpecCoverage checks that every rule of the dead-lettering contract is
// named by at least one test file (a _test.go file of a package with Test
// functions) or
// listed as not implemented in docs/spec-coverage.md, with a reason.
func TestSpecCoverage(t *testing.T) {
	root := ".."
	named := map[string][]string{}
	mentions := map[string][]string{}
	testDirs := map[string]bool{}
	isTest := regexp.MustCompile(`(?m)^func Test\w+\(t \*testing\.T\)`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "spec_coverage_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if isTest.Match(src) {
			testDirs[filepath.Dir(path)] = true
		}
		for _, r := range specRules {
			if regexp.MustCompile(regexp.QuoteMeta(r) + `([^0-9]|$)`).Match(src) {
				mentions[r] = append(mentions[r], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A mention counts when its package has tests to run it (scenario
	// tables may live in a file of their own).
	for r, paths := range mentions {
		for _, p := range paths {
			if testDirs[filepath.Dir(p)] {
				named[r] = append(named[r], p)
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "spec-coverage.md"))
	if err != nil {
		t.Fatal(err)
	}
	notImpl := map[string]bool{}
	inSection := false
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "## ") {
			inSection = strings.HasPrefix(line, "## Not implemented")
			continue
		}
		if inSection && strings.HasPrefix(line, "| R") {
			cells := strings.Split(line, "|")
			if len(cells) < 4 || strings.TrimSpace(cells[3]) == "" {
				t.Errorf("docs/spec-coverage.md: %q lists a rule without a reason", line)
			}
			notImpl[strings.TrimSpace(cells[1])] = true
		}
	}
	for _, r := range specRules {
		if len(named[r]) == 0 && !notImpl[r] {
			t.Errorf("rule %s: no test names it and docs/spec-coverage.md does not list it as not implemented", r)
		}
	}
	t.Logf("%d rules, %d named by tests, %d with parts listed as not implemented", len(specRules), len(named), len(notImpl))
}
