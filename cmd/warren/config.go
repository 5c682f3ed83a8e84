package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
)

// applyConfig sets every flag not given on the command line from the
// environment (WARREN_AMQP_ADDR for --amqp-addr), then from the config
// file. Unknown names in the file are errors, so typos do not pass silently.
func applyConfig(fs *flag.FlagSet, file string, environ []string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "WARREN_") {
			env[strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "WARREN_")), "_", "-")] = v
		}
	}
	if file == "" {
		file = env["config"]
	}
	fileVals := map[string]string{}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return fmt.Errorf("%s:%d: want 'name = value'", file, n)
			}
			k = strings.ReplaceAll(strings.TrimSpace(k), "_", "-")
			if fs.Lookup(k) == nil {
				return fmt.Errorf("%s:%d: unknown setting %q", file, n, k)
			}
			fileVals[k] = strings.Trim(strings.TrimSpace(v), `"`)
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] || f.Name == "config" {
			return
		}
		v, ok := env[f.Name]
		src := "WARREN_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if !ok {
			v, ok = fileVals[f.Name]
			src = file
		}
		if ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s: %s: %w", src, f.Name, e)
			}
		}
	})
	return err
}
